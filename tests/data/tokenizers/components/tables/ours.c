#include <stdio.h>
#include "../../work/main/src/tokenizer/components.h"
int main(void) {
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xd800 && cp <= 0xdfff) continue;
        int other = (cp == 0 || cp == 0xfffd || (cp != 9 && cp != 10 && cp != 13 && tm__rust_is_other(cp))) ? 1 :
                    (cp == 9 || cp == 10 || cp == 13 || tm__is_whitespace(cp)) ? 2 : 0;
        int mn = tm__rust_is_mark_nonspacing(cp);
        int cm = tm__rust_is_combining_mark(cp);
        char lo[32];
        if (cp == 0x130) snprintf(lo, sizeof lo, "69,307");
        else snprintf(lo, sizeof lo, "%x", tm__rust_lower(cp));
        int w = tm__rust_regex_word(cp) ? 1 : tm__is_whitespace(cp) ? 2 : 3;
        int p = tm__rust_is_punctuation(cp) ? 3 : 1;
        int d = tm__rust_is_numeric(cp) ? 3 : 1;
        int s = tm__is_whitespace(cp) ? 2 : 1;
        printf("%x %d %d %d %s %d %d %d %d\n", cp, other, mn, cm, lo, w, p, d, s);
    }
}
