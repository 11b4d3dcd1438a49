#include <stdio.h>
#include <utf8proc.h>
int main(void){ for (int c=0;c<0x110000;c++){ if(c>=0xd800&&c<=0xdfff)continue; int k=utf8proc_get_property(c)->combining_class; if(k) printf("%x %d\n",c,k);} }
