#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "../../work/main/src/tokenizer/components.h"
int main(int argc, char **argv) {
    int translate = getenv("TRANSLATE") != NULL;
    for (int a = 1; a < argc; a++) {
        char re[256];
        if (argv[a][0] == '\\') snprintf(re, sizeof re, "^(?:%s)$", argv[a]);
        else snprintf(re, sizeof re, "^(?:\\p{%s})$", argv[a]);
        char *src = re;
        if (translate) tm__onig_translate(re, strlen(re), &src, NULL);
        int ec; PCRE2_SIZE eo;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, PCRE2_UTF|PCRE2_UCP, &ec, &eo, NULL);
        if (!c) { printf("%s\tERROR\n", argv[a]); continue; }
        pcre2_match_data *md = pcre2_match_data_create(4, NULL);
        printf("%s\t", argv[a]);
        int first = 1;
        for (uint32_t cp = 0; cp < 0x110000; cp++) {
            if (cp >= 0xd800 && cp <= 0xdfff) continue;
            char b[4]; size_t n = tm__utf8_encode(cp, b);
            if (pcre2_match(c, (PCRE2_SPTR)b, n, 0, 0, md, NULL) >= 0) { printf(first ? "%u" : ",%u", cp); first = 0; }
        }
        printf("\n");
    }
}
