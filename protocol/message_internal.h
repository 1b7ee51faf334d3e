/* Internal interface between protocol/message.c (checking, decoding) and
 * protocol/message_encode.c. Not for other modules: use protocol/message.h. */
#ifndef PT_PROTOCOL_MESSAGE_INTERNAL_H
#define PT_PROTOCOL_MESSAGE_INTERNAL_H

#include <cjson/cJSON.h>

#include "protocol/message.h"

/* 1 for types whose "req" echoes a request (ack, checkpoint_ack). */
int pt_msg_internal_is_reply(pt_msg_type type);

/* Reads root (an object whose "v" was checked) into *m; on failure *m is
 * cleared and err says "<src_base> (<type>): <field>: <reason>". */
int pt_msg_internal_check_tree(const cJSON *root, const char *src_base, pt_msg *m, pt_error *err);

/* Compact text of a tree we own, every number written so it reads back
 * exactly (cJSON's printer rounds beyond 15 digits); the numbers of root
 * become raw items. malloc'd; NULL on no memory. */
char *pt_msg_internal_print_exact(cJSON *root);
/* Checks o's "peers" array as the decoder checks an assign's (entries,
 * endpoints, keys, repeated ranks), taking the first entry as the agent's
 * own. 0, or the decoder's error. */
int pt_msg_internal_check_peers(const cJSON *o, pt_error *err);

#endif
