"""The texts on which SmolLM2's tokenizer, ours, must give the ids of the ``tokenizers`` library.

Written for the purpose, grouped by kind (``CASES[kind]`` is a list of strings), so that a
report can count them by kind: ``{kind: len(texts) for kind, texts in CASES.items()}``. Each
kind aims at one part of the tokenizer: the pre-tokenizer's classes of characters (letters,
numbers, symbols, whitespace) and its English endings, the byte alphabet (accents, emoji, other
scripts), the merges (long words, code), and the special tokens of the chat template.
"""

from __future__ import annotations

CASES: dict[str, list[str]] = {
    "italian prose": [
        "Nel mezzo del cammin di nostra vita mi ritrovai per una selva oscura.",
        "C'era una volta... - Un re! - diranno subito i miei piccoli lettori.",
        "Il gatto dorme sul divano perché è stanco.",
        "La città è così bella? Già, più caffè e un po' di tiramisù.",
        "Mastr'Antonio, falegname, trovò un pezzo di legno che piangeva e rideva come un bambino.",
        "Gli studenti hanno consegnato le relazioni venerdì; il professore le leggerà lunedì.",
        "Quell'uomo, sebbene fosse già tardi, continuò a lavorare finché non finì.",
        "«Ho fame», disse Pinocchio, «e voglio mangiare subito!»",
        "Perché l'intelligenza artificiale è così diffusa? Perché funziona, almeno spesso.",
    ],
    "english prose": [
        "The quick brown fox jumps over the lazy dog.",
        " The cat is sleeping on the sofa because it is tired.",
        "Attention is all you need: a model built only on attention, without recurrence.",
        "don't won't I'm you'll we've they'd it's WE'RE DON'T She'S",
        '"Quoted text", (parentheses) and [brackets] - plus an em dash — and ellipsis…',
        "Mr. O'Neill's dog's bone; the children's toys; rock 'n' roll.",
    ],
    "accents and apostrophes": [
        "l'attenzione",
        "perché",
        "È",
        "È vero: l'Italia è bella.",
        "dell'Italia",
        "un'altra volta, quest'anno, c'è, po', qual è",
        "L'ATTENZIONE È GIÀ LÌ, PERCHÉ",
        "naïve façade, coöperate, Ærøskøbing, São Paulo, Zürich, Łódź, İstanbul",
        "l’apostrofo tipografico: l’Italia, dell’arte",
        "e\u0301 (e + combining accent) vs é",
    ],
    "numbers and dates": [
        "12345 and 3.14159, on 2024-01-01",
        "Il 3 dicembre 2026 alle 18:25, 1.234.567,89 €",
        "1st 2nd 3rd 4th; 10% of 250 = 25; -7 +8 ±9",
        "2024/12/31 23:59:59.999Z, 1e-6, 0x1F, 0b1010, 1_000_000",
        "Ⅻ ½ ¾ ² ³ ٣ ४ 五",
        "+39 06 1234 5678, CAP 00184, IBAN IT60X0542811101000000123456",
        "3,14 vs 3.14; 1'000'000; 10^9; 2**10 = 1024; π ≈ 3.14159265358979",
        "lunedì 1° gennaio 2024, ore 9.30 — 31/12/1999, 12-31-99, Q3 FY2025",
    ],
    "code": [
        "def f(x):\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
        "import numpy as np\nx = np.zeros((2, 3), dtype=np.float32)\nprint(x.shape)\n",
        '<div class="note">Hello &amp; welcome</div>',
        "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
        "    if (a && b || !c) return a->next;\n\t\tbreak;",
        '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    ],
    "urls and paths": [
        "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#top",
        "mailto:mario.rossi@example.it, www.example.com/path/to/file.html",
        "C:\\Users\\mario\\Documenti\\tesi.docx and /usr/local/bin/python3",
        "http://localhost:8000/api/v1/items?id=42&sort=desc",
        "git@github.com:huggingface/transformers.git ~/.cache/huggingface/hub",
    ],
    "emoji": [
        "I love 🤗 and 🍕!",
        "👍🏽 👨‍👩‍👧‍👦 🇮🇹 🏳️‍🌈 ❤️ ✔︎",
        "🏴󠁧󠁢󠁳󠁣󠁴󠁿 (a flag made of tag characters)",
        "😀😃😄😁😆😅😂🤣",
        "Bravo!👏👏 Ottimo lavoro 💪🇮🇹",
        "☕ ☀️ ⚡ ♻️ © ® ™ → ← ∞ ✓",
    ],
    "other scripts": [
        "我爱自然语言处理。今天天气很好!",
        "العربية لغة جميلة، أليس كذلك؟",
        "Привет, как дела? Всё хорошо.",
        "हिन्दी एक सुंदर भाषा है।",
        "Ωμέγα, αλφάβητο, Ελλάδα",
        "日本語のテキスト、カタカナとひらがな。",
        "한국어 문장입니다.",
        "עברית מימין לשמאל",
        "ภาษาไทยไม่มีช่องว่าง",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 and 𐍈 gothic",
    ],
    "whitespace": [
        "",
        " ",
        "   ",
        "a   b\t\tc\n\n\nd  ",
        "line one\r\nline two\r\n\r\n",
        "\ttab\t \t mixed \n \n",
        "trailing spaces   ",
        "   leading spaces",
        "non\u00a0breaking\u2009thin\u3000ideographic\u2028line\u2029para",
        "\x0b\x0c\x1c\x85 other whitespace",
        "words  with   growing    gaps",
    ],
    "special tokens": [
        "<|endoftext|>",
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nCiao!<|im_end|>\n",
        "text<|im_end|>text<|im_start|><|im_end|>",
        "<|im_start <|im_end| <im_end|> half-written markup",
        "<repo_name>transformer_np<file_sep>tokenizer.py<|endoftext|>",
        " <|im_start|> spaces around <|im_end|> ",
    ],
}
