/* Training precision: the arithmetic a profile's times were made for and the
 * bytes its tensors take (docs/formats.md, "Precision"). One table holds
 * every fact about each precision; the device, profile and plan formats name
 * them by the table's strings, and the analytic profile and the cost model
 * read the byte counts from it.
 *
 *   name   compute (the device peak used)   activations  weights  grads  master
 *   fp32   fp32 (non-tensor)                 4            4        4      -
 *   tf32   tf32 tensor cores, fp32 storage   4            4        4      -
 *   bf16   bf16 tensor cores, mixed          2            2        2      4
 *   fp16   fp16 tensor cores, mixed          2            2        2      4
 *   fp8    fp8 tensor cores (Transformer     2            2        2      4
 *          Engine: GEMM inputs cast to fp8,
 *          tensors kept in bf16)
 *
 * Mixed precision (a master copy): the optimizer steps an fp32 master copy
 * of the weights and keeps its moments in fp32 (Micikevicius et al., "Mixed
 * Precision Training", ICLR 2018; ZeRO's accounting, Rajbhandari et al.,
 * SC'20: 2 + 2 + 12 = 16 bytes per parameter with Adam). */
#ifndef PT_PROTOCOL_PRECISION_H
#define PT_PROTOCOL_PRECISION_H

#define PT_PRECISION_LIST(X)                                                                       \
    X(PT_PRECISION_FP32, "fp32", 4, 4, 0)                                                          \
    X(PT_PRECISION_TF32, "tf32", 4, 4, 0)                                                          \
    X(PT_PRECISION_BF16, "bf16", 2, 2, 4)                                                          \
    X(PT_PRECISION_FP16, "fp16", 2, 2, 4)                                                          \
    X(PT_PRECISION_FP8, "fp8", 2, 2, 4)

typedef enum pt_precision {
#define PT_PRECISION_ENUM(id, name, act, weight, master) id,
    PT_PRECISION_LIST(PT_PRECISION_ENUM)
#undef PT_PRECISION_ENUM
        PT_PRECISION_COUNT
} pt_precision;

/* Bytes an optimizer keeps per fp32 moment (momentum, Adam's m and v). */
#define PT_PRECISION_MOMENT_BYTES 4

/* "fp32", ...; NULL out of range. */
const char *pt_precision_name(int precision);
/* The precision named `name`; -1 when none is (name may be NULL). */
int pt_precision_parse(const char *name);
/* "fp32, tf32, bf16, fp16 or fp8", for error messages. */
const char *pt_precision_names(void);
/* Bytes per activation element (what a layer keeps for its backward). */
int pt_precision_act_bytes(int precision);
/* Bytes per weight element (the live parameters and their gradients). */
int pt_precision_weight_bytes(int precision);
/* Bytes per parameter of the fp32 master copy: 4 in mixed precision, 0 when
 * the weights are fp32 already. */
int pt_precision_master_bytes(int precision);

#endif
