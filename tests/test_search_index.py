"""hooks/search_index.py: one search index per language, formulas written as text.

On made-up entries here; ``test_site_build.py`` checks the indexes of the built site and
``test_browser.py`` searches them in Chromium.
"""

import json

import pytest

from doctools import load_hook

hook = load_hook("search_index.py")


@pytest.mark.parametrize(
    "tex, text",
    [
        (r"\sqrt{d_k}", "√(d_k)"),
        (r"\text{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V", "softmax(QK^⊤/√(d_k)) V"),
        (r"5 \cdot 10^{-4}", "5 ·10^-4"),
        (r"x \in \mathbb{R}^{n \times d}", "x ∈ℝ^n ×d"),
    ],
)
def test_a_formula_becomes_text(tex, text):
    assert hook.formula_text(tex) == text


def test_the_formulas_of_an_entry_become_text_and_stay_escaped():
    fragment = r"<p>the scores \(q \cdot k &lt; \sqrt{d_k}\), then</p> \[\frac{a}{b}\]"
    assert hook.formulas_as_text(fragment) == "<p>the scores q ·k &lt; √(d_k), then</p> a/b"


def test_a_notebooks_dollar_formulas_become_text_but_not_in_code():
    fragment = (
        r"<p>$$\text{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$ with ($\tau &gt; 1$)</p>"
        r"<pre><code>$ python -m x  # costs $5 and \(this\)</code></pre>"
    )
    assert hook.formulas_as_text(fragment) == (
        "<p>softmax(x)_i = e^x_i/∑_j e^x_j with (τ&gt; 1)</p>"
        r"<pre><code>$ python -m x  # costs $5 and \(this\)</code></pre>"
    )


def test_each_language_gets_its_own_entries_relative_to_its_folder():
    merged = {
        "config": {"lang": ["it", "en"], "separator": "[\\s\\-]+"},
        "docs": [
            {"location": "", "title": "Inizio", "text": "ciao"},
            {"location": "attention/#pesi", "title": r"Pesi \(w\)", "text": r"\(\alpha\)"},
            {"location": "en/", "title": "Start", "text": "hello"},
            {"location": "en/attention/#weights", "title": "Weights", "text": r"\(\alpha\)"},
            {"location": "reference/masks/", "title": "masks", "text": "same"},
            {"location": "en/reference/masks/", "title": "masks", "text": "same"},
        ],
    }
    out = hook.split_index(merged, "it", ["en"])
    assert out["it"]["config"] == {"lang": ["it"], "separator": "[\\s\\-]+"}
    assert out["en"]["config"]["lang"] == ["en"]
    assert [d["location"] for d in out["it"]["docs"]] == ["", "attention/#pesi", "reference/masks/"]
    assert [d["location"] for d in out["en"]["docs"]] == ["", "attention/#weights",
                                                          "reference/masks/"]  # fmt: skip
    assert out["it"]["docs"][1] == {"location": "attention/#pesi", "title": "Pesi w", "text": "α"}
    # an English entry with the Italian entry's text is kept (the API reference, in English)
    assert out["en"]["docs"][2]["text"] == "same"


def test_a_page_in_another_language_reads_its_own_index():
    class I18n:
        default_language, current_language = "it", "en"

    class Config(dict):
        plugins = {"i18n": I18n()}

    page = '<script id="__config" type="application/json">{"base": "../..", "x": 1}</script>'
    out = hook.on_post_page(page, None, Config())
    data = json.loads(out.split(">", 1)[1].rsplit("<", 1)[0])
    assert data == {"base": "../../en/", "x": 1}
    I18n.current_language = "it"
    assert hook.on_post_page(page, None, Config()) == page
