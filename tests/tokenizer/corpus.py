"""The tokenizer parity corpus: the shared evaluation texts (whole and by
paragraph), a generated stress corpus (seeded, so every run is the same) and a
sweep over every Unicode scalar value."""
import os
import random
import unicodedata

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "<s>", "</s>", "<unk>", "<0x0A>", "<tool_call>", "[MASK]", "<|im_start|>x",
            "<repo_name>", "<|reserved_special_token_5|>", "qqword", " qqword ", "aqqword"]
FRAGMENTS = [
    "Hello", "world", " the", "The", "don't", "I'm", "we'll", "they're", "you've", "she'd", "it's", "IT'S", "WE'LL",
    "'S", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'Re", "'lL", "'ſ", "'x", "''s", "'", "\"quoted\"",
    "123", "4567", "1234567890123", "3.14159", "1,000,000", "٠١٢٣٤٥", "１２３", "²³", "Ⅻ", "½",
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u200b", "\u000b", "\u000c",
    "\u0085", "\u001c", "\u001f", "\u0000", "\u007f", "\u00ad",
    "日本語のテキスト", "中文字符", "한국어 텍스트", "\u1100\u1161\u11a8", "\uac00\u11a8",
    "emoji 😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇩🇪", "❤️", "🤖",
    "e\u0301", "a\u0308\u0323", "a\u0323\u0308", "\u1e9b\u0323", "Å", "Å", "ﬁ", "ǅ", "ẞ", "ſ",
    "مرحبا بالعالم", "שלום", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Привет, мир", "Ελληνικά", "ქართული",
    "\u2581", "\u2581\u2581word", "Ġthe", "Ċ", "<0x41>", "▁▁",
    "!!!", "...", "?!", "—", "–", "«»", "©®™", "$%^&*", "(x)", "[y]", "{z}", "a_b", "x-y", "@user", "#tag", "http://x.y/z?q=1",
    "\U0010ffff", "\ue000", "\ufffe", "\uffff", "\U000e0001", "\u0378", "\U0001fbf9",
]


def stress(rng, n):
    out = []
    pool = FRAGMENTS + SPECIALS
    for _ in range(n):
        k = rng.randint(1, 12)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.7:
                parts.append(rng.choice(pool))
            elif r < 0.85:
                parts.append(rng.choice([" ", "", "\n", "  ", "\t"]))
            else:
                parts.append("".join(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                                     rng.randint(0x3000, 0xd7ff), rng.randint(0xe000, 0x10ffff)]))
                                     for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    # combining marks in random order and NFC-sensitive sequences
    marks = [c for c in range(0x300, 0x370)] + [0x1ab0, 0x1dc0, 0x20d0, 0x302a, 0x0591, 0x05b0, 0x0e48]
    for _ in range(n // 4):
        base = rng.choice("aeiouAEIOUnckgszKα\u1100\uac00")
        out.append(base + "".join(chr(rng.choice(marks)) for _ in range(rng.randint(1, 4))) + rng.choice(["", " x", "1"]))
        out.append(unicodedata.normalize("NFD", rng.choice(["Ḱey façade", "Ωmega café", "한국어", "ǖǘǚ", "ḝ"])))
    # long runs
    out += [" " * 300 + "x", "9" * 200, "a" * 500, "\n" * 50 + "end", "ab" * 300, "é" * 200, "😀" * 100,
            "<s>" * 20, "x" + "\u2581" * 40]
    return out


def build_corpus(models):
    texts = ["", " ", "  ", "a", " a", "a ", "<s>", "<|im_start|>", "\u2581"]
    for name in ("tinystories_valid_excerpt.txt", "war_and_peace_excerpt.txt"):
        with open(os.path.join(models, "eval", name), encoding="utf-8") as f:
            whole = f.read()
        texts.append(whole)
        texts += [p for p in whole.split("\n\n") if p]
    texts += stress(random.Random(1234), 3000)
    # every scalar value of planes 0-3 and 14, a sample of the rest (unassigned / private use)
    cps = [c for c in range(0x40000) if not 0xD800 <= c <= 0xDFFF] + list(range(0xE0000, 0xE0200)) + \
        list(range(0x40000, 0x110000, 97))
    for i in range(0, len(cps), 512):
        texts.append("".join(chr(c) for c in cps[i:i + 512]))
    return texts
