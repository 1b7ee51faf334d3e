/* pipetop keys --out DIR/NAME: a CURVE key pair for authenticated runs
 * (docs/formats.md, "Key files"; docs/architecture.md, "Trust"). A command
 * file, so it may use runtime/ (zmq_curve_keypair lives behind trust.h). */
#include <stdio.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/keyfile.h"
#include "protocol/opts.h"
#include "runtime/trust.h"
#include "tui/cli/commands.h"

int pt_cmd_keys(int argc, char **argv)
{
    const char *out = NULL;
    int force = 0;
    pt_opt opts[] = {
        {"out", PT_OPT_STRING, &out, 0, 0, 0, "DIR/NAME",
         "write DIR/NAME.key (the pair, mode 0600) and DIR/NAME.pub (the public key)"},
        {"force", PT_OPT_FLAG, &force, 0, 0, 0, NULL, "replace an existing DIR/NAME.key"},
    };
    int rc = pt_opts_command("keys", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             "usage: pipetop keys --out DIR/NAME [--force]\n"
                             "Makes a CURVE key pair. Give NAME.pub to the peers that must trust "
                             "this one\n(the console's allow-list, the agents' --server-key); "
                             "keep NAME.key secret.\n",
                             NULL);
    if (rc >= 0)
        return rc;
    if (!out || !out[0]) {
        fprintf(stderr, "pipetop keys: --out DIR/NAME is required\n");
        return 2;
    }
    pt_error err = {0};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (pt_mkdir_p(dir, &err) < 0) {
            fprintf(stderr, "pipetop keys: %s\n", err.msg);
            return 1;
        }
    }
    pt_keyfile k;
    if (pt_trust_keypair(&k, &err) < 0 || pt_keyfile_write_pair(out, &k, force, &err) < 0) {
        fprintf(stderr, "pipetop keys: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s.key (secret, mode 0600) and %s.pub\npublic key %s\n", out, out, k.public_z85);
    return 0;
}
