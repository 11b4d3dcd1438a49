#!/usr/bin/env python3
"""Seeds for fuzz/fuzz_tok_components.c: one file per component config of
tests/data/tokenizers/components/*.json (selector byte, the config JSON, NUL, one of its
inputs). Usage: fuzz/make_tok_component_seeds.py OUT_DIR"""
import json
import os
import sys

SRC = 'tests/data/tokenizers/components'


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    charsmap = open(os.path.join(SRC, 'charsmap.b64')).read().strip()
    n = 0
    for name, slot in (('normalizers.json', 0), ('pretokenizers.json', 1), ('decoders.json', 2)):
        for entry in json.load(open(os.path.join(SRC, name))):
            cfg = json.dumps(entry['config'], ensure_ascii=False).replace('@charsmap.b64', charsmap)
            for k, case in enumerate(entry['cases'][:4]):
                text = case['input'] if slot < 2 else ' '.join(case['tokens'])
                path = os.path.join(out, '%s_%s_%d' % (slot, entry['name'], k))
                with open(path, 'wb') as f:
                    f.write(bytes([slot]) + cfg.encode() + b'\0' + text.encode())
                n += 1
    print(n, 'seeds')


if __name__ == '__main__':
    main()
