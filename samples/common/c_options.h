/* Option parsing for the C samples (mix, spin8): "--name value" pairs only, each value read
 * with atoi() or atof() into the variable its table entry points to. A trailing name without a
 * value is ignored. An unknown name prints "<program>: unknown option <name>" on stderr and
 * makes sample_parse_options() return 2 (main's exit status); otherwise it returns 0.
 *
 *   struct sample_option options[] = {{"--threads", &threads, NULL},
 *                                     {"--duration", NULL, &duration}, {NULL, NULL, NULL}};
 *   if (sample_parse_options(argc, argv, "mix", options)) return 2;
 */
#ifndef SAMPLES_COMMON_C_OPTIONS_H
#define SAMPLES_COMMON_C_OPTIONS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sample_option {
    const char *name;      /* "--threads"; NULL ends the table */
    int *int_value;        /* set with atoi(), or NULL ... */
    double *double_value;  /* ... and this one set with atof() */
};

static inline int sample_parse_options(int argc, char **argv, const char *program,
                                       const struct sample_option *options) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const struct sample_option *o = options;
        while (o->name && strcmp(argv[i], o->name)) o++;
        if (!o->name) {
            fprintf(stderr, "%s: unknown option %s\n", program, argv[i]);
            return 2;
        }
        if (o->int_value) *o->int_value = atoi(argv[i + 1]);
        else *o->double_value = atof(argv[i + 1]);
    }
    return 0;
}

#endif
