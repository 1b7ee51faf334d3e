/* Data sets: Fashion-MNIST from the Debian package's IDX files, and synthetic
 * classification and token data of any shape.
 *
 * Every data set has the same face: a sample count, a number of input floats
 * per sample, a number of int32 labels per sample, and get_batch, which gathers
 * samples by index into caller-owned buffers. A data set is read-only after it
 * is made, so several threads may call get_batch on it at once.
 *
 * Token data (for GPT-style models) stores each sample as seq_len token ids,
 * given to the model as floats holding exact small integers, with seq_len
 * labels: the next token at every position.
 *
 * The order in which an epoch visits samples comes from pt_data_order, a
 * function of (sample count, seed, epoch) only, so the same seed gives the
 * same data order on every machine and in every partition of a pipeline. */
#ifndef PT_RUNTIME_DATA_H
#define PT_RUNTIME_DATA_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"

typedef struct pt_dataset pt_dataset;

/* Where the Debian package dataset-fashion-mnist installs its files; the
 * environment variable PT_FASHION_MNIST_DIR overrides it. */
#define PT_FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define PT_FMNIST_DIR_ENV     "PT_FASHION_MNIST_DIR"
#define PT_FMNIST_SIDE_PX     28
#define PT_FMNIST_CLASSES     10
/* Mean and standard deviation of the training pixels after scaling to [0,1]. */
#define PT_FMNIST_MEAN 0.2860f
#define PT_FMNIST_STD  0.3530f

typedef enum pt_data_split { PT_DATA_TRAIN, PT_DATA_TEST } pt_data_split;

/* Loads one split of Fashion-MNIST from `dir` (NULL: $PT_FASHION_MNIST_DIR,
 * else PT_FMNIST_DEFAULT_DIR): {train,t10k}-images-idx3-ubyte.gz and
 * {train,t10k}-labels-idx1-ubyte.gz (plain, uncompressed files are read too).
 * Pixels become floats in [0,1], or (p - PT_FMNIST_MEAN) / PT_FMNIST_STD when
 * `normalise` is set. Magic numbers, dimensions (28x28), label range and
 * truncation are checked; errors name the file. A missing file is
 * PT_ENOTFOUND with a message naming the Debian package to install. On
 * success *out owns a new data set; on failure *out is NULL. */
int pt_dataset_fmnist_load(const char *dir, pt_data_split split, int normalise, pt_dataset **out,
                           pt_error *err);

/* Synthetic classification: `count` samples of `input_elems` floats in
 * `classes` classes. Each class has a fixed random prototype and a sample is
 * its class's prototype plus uniform noise, so the labels are learnable (a
 * linear model separates them). Everything is a pure function of (seed,
 * sample index): the train and test splits of one seed share prototypes and
 * draw different samples. Samples are generated on demand, so any input size
 * costs no memory. *out owns the new data set. */
int pt_dataset_synth_class_new(int64_t count, int64_t input_elems, int classes, uint64_t seed,
                               pt_data_split split, pt_dataset **out, pt_error *err);

/* Synthetic tokens: `count` sequences of `seq_len` token ids below `vocab`
 * from a fixed random Markov chain (from seed): after token t comes
 * succ(t) with probability PT_SYNTH_FOLLOW_P and a uniform token otherwise.
 * Labels are the next tokens, so the best achievable mean cross-entropy is
 * pt_dataset_synth_tokens_entropy(vocab) nats, far below log(vocab). */
#define PT_SYNTH_FOLLOW_P 0.9
int pt_dataset_synth_tokens_new(int64_t count, int seq_len, int vocab, uint64_t seed,
                                pt_data_split split, pt_dataset **out, pt_error *err);
/* Entropy (nats) of the next token of the synthetic chain: the floor of the
 * cross-entropy loss a perfect model reaches. */
double pt_dataset_synth_tokens_entropy(int vocab);

/* The seed of the synthetic data sets that pipetop train and the agents use,
 * so every run (and a pipeline against single-device training) sees the same
 * samples whatever its --seed; --seed only changes initialisation and order. */
#define PT_SYNTH_DATA_SEED 20261129u

/* Default sample counts of the synthetic splits made by pt_dataset_open. */
#define PT_SYNTH_TRAIN_COUNT 8192
#define PT_SYNTH_TEST_COUNT  1024

/* Opens data set `name` ("fashion-mnist" or "synthetic") for `spec`: checks
 * that the model's input shape and classes fit the data (fashion-mnist needs
 * 784 float inputs and 10 classes); synthetic data takes its shape from the
 * model (token data for token models, sequence length input[0] and vocabulary
 * = classes of the loss). Fashion-MNIST is normalised. err names the model
 * and data set on a mismatch. *out owns the new data set. */
int pt_dataset_open(const char *name, const pt_model_spec *spec, pt_data_split split, uint64_t seed,
                    pt_dataset **out, pt_error *err);

/* Frees a data set (NULL-safe) and sets *ds_p = NULL. */
void pt_dataset_free(pt_dataset **ds_p);

/* Keeps only the first n samples (n <= 0 or n >= count: no change). */
void pt_dataset_limit(pt_dataset *ds, int64_t n);

int64_t pt_dataset_count(const pt_dataset *ds);
/* Floats per sample given to the model. */
int64_t pt_dataset_input_elems(const pt_dataset *ds);
/* int32 labels per sample: 1 for classification, seq_len for tokens. */
int pt_dataset_labels_per_sample(const pt_dataset *ds);
/* Number of classes (the vocabulary for tokens); labels lie in [0, classes). */
int pt_dataset_classes(const pt_dataset *ds);
/* A short description ("fashion-mnist train", "synthetic tokens"); never NULL. */
const char *pt_dataset_name(const pt_dataset *ds);

/* Gathers samples indices[0..n) into x_out (n * input_elems floats) and
 * labels_out (n * labels_per_sample int32), both owned by the caller; either
 * may be NULL to skip it. Returns 0, or PT_ERANGE when an index lies outside
 * [0, count) (nothing is defined about the buffers then). Allocation-free. */
int pt_dataset_get_batch(const pt_dataset *ds, const int64_t *indices, int n, float *x_out,
                         int32_t *labels_out);

/* Fills order[0..n) with a permutation of 0..n-1 that depends only on (n,
 * seed, epoch): the visiting order of one epoch. */
void pt_data_order(int64_t n, uint64_t seed, int64_t epoch, int64_t *order);

#endif
