"""Tokenizer and pipelines from Python: the shared tokenizer cases (Hugging Face's outputs)
field by field, and pipeline calls equal to `transmuter pipeline --call`'s JSON."""
import json
import os
import subprocess
import threading
import unittest

import transmuter
from common import BUILD, DATA, cli

PIPES = os.path.join(DATA, "pipelines")


def tokenizer_cases(name):
    folder = os.path.join(BUILD, "tokenizers", name)
    if not os.path.exists(os.path.join(folder, "cases.jsonl")):   # unpacked by this test program
        subprocess.run([os.path.join(BUILD, "tests", "test_tokenizer_cases"), BUILD],
                       capture_output=True)
    with open(os.path.join(folder, "cases.jsonl"), encoding="utf-8") as f:
        return folder, [json.loads(line) for line in f]


class TestTokenizer(unittest.TestCase):
    def check(self, name):
        folder, cases = tokenizer_cases(name)
        tok = transmuter.Tokenizer.from_pretrained(folder)
        self.assertGreater(len(cases), 10)
        for c in cases:
            with self.subTest(c["id"], add_special_tokens=c["add_special_tokens"]):
                # the references are transformers' calls, where an empty pair means none
                e = tok.encode(c["text"], c.get("pair") or None,
                               add_special_tokens=c["add_special_tokens"])
                self.assertEqual(e.ids, c["ids"])
                self.assertIn(e.tokens, (c["tokens"], c.get("rust_tokenizers", {}).get("tokens")))
                self.assertEqual(e.attention_mask, c["attention_mask"])
                if "token_type_ids" in c:
                    self.assertEqual(e.type_ids, c["token_type_ids"])
                self.assertEqual(tok.decode(e.ids), c["decoded"])
                self.assertEqual(tok.decode(e.ids, skip_special_tokens=True), c["decoded_skip_special"])
        texts = [c["text"] for c in cases if c["add_special_tokens"] and "pair" not in c]
        batch = tok.encode_batch(texts, threads=2)
        self.assertEqual([b.ids for b in batch], [tok.encode(t).ids for t in texts])

    def test_wordpiece(self):
        self.check("all-minilm-l6-v2")

    def test_byte_level_bpe(self):
        self.check("qwen3")

    def test_padding_and_arrays(self):
        tok = transmuter.Tokenizer.from_pretrained(os.path.join(PIPES, "minilm-embed"))
        enc = tok(["Hello world!", "a much longer sentence than that"])
        self.assertEqual(enc["input_ids"].shape, enc["attention_mask"].shape)
        self.assertEqual(enc["attention_mask"][0].sum(), 5)
        self.assertEqual(tok.special_tokens["cls"], ("[CLS]", 101))
        self.assertEqual(tok.token_to_id("hello"), 7592)
        self.assertEqual(tok.id_to_token(7592), "hello")
        e = tok.encode("Hello world!")
        self.assertEqual(e.offsets[1], (0, 5))

    def test_bad_utf8_and_missing(self):
        with self.assertRaises(transmuter.Error):
            transmuter.Tokenizer.from_pretrained("/nonexistent/tokenizer")


REPOS = ["minilm-embed", "bert-sentiment", "bert-multilabel", "bert-nli", "bert-ner", "bert-mlm",
         "distilbert-qa", "gpt2-gen"]


class TestPipelines(unittest.TestCase):
    def test_calls_equal_the_cli(self):
        for repo in REPOS:
            path = os.path.join(PIPES, repo)
            with open(path + ".cases.jsonl", encoding="utf-8") as f:
                lines = [l for l in f.read().split("\n") if l][:4]
            pipes = {}
            for line in lines:
                case = json.loads(line)
                if "error" in case:
                    continue
                with self.subTest(repo, inputs=case["inputs"]):
                    key = (case["task"], json.dumps(case.get("load")))
                    if key not in pipes:
                        pipes[key] = transmuter.pipeline(case["task"], path, **(case.get("load") or {}))
                    got = pipes[key](*case["inputs"], **(case.get("options") or {}))
                    want = json.loads(cli("pipeline", case["task"], path, "--call", line).stdout)
                    self.assertEqual(got, want)

    def test_errors_carry_the_message(self):
        p = transmuter.pipeline("fill-mask", os.path.join(PIPES, "bert-mlm"))
        with self.assertRaises(transmuter.Error) as cm:
            p("no mask token here")
        self.assertIn("Mask token ([MASK]) not found", str(cm.exception))
        with self.assertRaises(transmuter.Error):
            transmuter.pipeline("no-such-task", os.path.join(PIPES, "bert-mlm"))

    def test_threads_share_a_pipeline(self):
        p = transmuter.pipeline("text-classification", os.path.join(PIPES, "bert-sentiment"))
        want = p(["good", "bad"])
        got, errors = [], []

        def work():
            try:
                for _ in range(10):
                    got.append(p(["good", "bad"]))
            except Exception as e:
                errors.append(e)
        ts = [threading.Thread(target=work) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertTrue(len(got) == 30 and all(g == want for g in got))


if __name__ == "__main__":
    unittest.main()
