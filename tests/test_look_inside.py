"""The page "Guarda dentro" / "Look inside": its data, its arithmetic and its views in Chromium.

- The data the site ships (``assets/look-inside/*.json``, written by ``hooks/look_inside.py``)
  is what the package computes: one sentence's attention weights of MiniLM and SmolLM2 (within
  the 8-bit step), the residual norms and the next-token logits, recomputed here.
- The page's script does the sampling arithmetic of ``transformer_np.sampling``: its
  ``LookInside.probabilities`` is run in the browser on the shipped logits and compared with
  ``sampling.weights``.
- Every view renders in both languages, without a console error or a request outside the site;
  each control changes the view; what is drawn is the data (the strongest cell of a head is that
  head's argmax); the page works from the keyboard, in the dark scheme and on a phone's width.
  Screenshots of each view go to ``test-artifacts/look-inside/``.
"""

from __future__ import annotations

import functools
import json
import shutil
import threading
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS

from doctools import ROOT, load_hook, page_url_path

hook = load_hook("look_inside.py")
SHOTS = ROOT / "test-artifacts" / "look-inside"
LANGS = ("it", "en")
VIEWS = ("attention", "next", "residual")
# The 8-bit code of a weight w is round(255 w): at most half a step away, plus float32 noise
# between two runs of the same forward pass (different threads may sum in another order).
HALF_STEP = 0.5 / 255 + 1e-5
# Logits are shipped rounded to 4 decimals.
LOGIT_ATOL = 0.5e-4 + 1e-4


def shipped(built_site, name: str) -> dict:
    path = built_site.path / hook.DEST / f"{name}.json"
    assert path.is_file(), f"the site does not ship {path}"
    return json.loads(path.read_text(encoding="utf-8"))


def _minilm():
    from transformer_np.pretrained import load_minilm

    try:
        return load_minilm()
    except (ImportError, OSError) as exc:
        pytest.skip(f"MiniLM is not installed: {exc}")


def _smollm2():
    from transformer_np.pretrained import load_smollm2

    try:
        return load_smollm2()
    except (ImportError, OSError) as exc:
        pytest.skip(f"SmolLM2 is not installed: {exc}")


# --------------------------------------------------------------------------------------------
# The data: what the site ships is what the package computes


def test_site_ships_every_view_with_every_model(built_site):
    for name in VIEWS:
        data = shipped(built_site, name)
        assert data["format"] == hook.FORMAT
        assert data["sentences"] == hook.SENTENCES
    attention = shipped(built_site, "attention")
    missing = attention["missing"]
    assert set(attention["attention"]) | set(missing) == {"minilm", "smollm2"}
    for model, sentences in attention["attention"].items():
        assert list(sentences) == list(hook.SENTENCES), model
    nxt = shipped(built_site, "next")["next"]
    assert {k: [v["prompt"] for v in rows.values()] for k, rows in nxt.items()} == {
        k: list(v.values()) for k, v in hook.PROMPTS.items() if k not in missing
    }


def test_minilm_attention_shipped_is_the_packages(built_site):
    entry = shipped(built_site, "attention")["attention"].get("minilm")
    model = _minilm()
    if entry is None:
        pytest.fail("MiniLM is installed but the site has no MiniLM data")
    text = hook.SENTENCES["trophy-big"]
    weights, tokens = model.attentions(text)  # (L, H, T, T)
    entry = entry["trophy-big"]
    assert entry["tokens"] == tokens
    assert entry["shape"] == list(weights.shape)
    drawn = hook.dequantise(entry)
    np.testing.assert_allclose(drawn, weights, rtol=0, atol=HALF_STEP)


def test_smollm2_attention_residual_and_logits_shipped_are_the_packages(built_site):
    attention = shipped(built_site, "attention")["attention"].get("smollm2")
    residual = shipped(built_site, "residual")["residual"].get("smollm2")
    nxt = shipped(built_site, "next")["next"].get("smollm2")
    model, tokenizer = _smollm2()
    if attention is None or residual is None or nxt is None:
        pytest.fail("SmolLM2 is installed but the site has no SmolLM2 data")
    from transformer_np.masks import causal_mask

    # The model's own forward: the attention weights every block keeps.
    text = hook.SENTENCES["trophy-big"]
    ids = np.array([tokenizer.encode(text)])  # (1, T)
    logits = model(ids)  # (1, T, V)
    weights = np.stack([block.attention_weights[0] for block in model.blocks.layers])
    entry = attention["trophy-big"]
    assert entry["tokens"] == [tokenizer.decode([i]) for i in ids[0]]
    assert entry["shape"] == list(weights.shape) and entry["causal"]
    np.testing.assert_allclose(hook.dequantise(entry), weights, rtol=0, atol=HALF_STEP)
    # The residual stream, block after block: the same stack, run one block at a time, must end
    # where the model's forward ends (its logits).
    x = model.embed(ids)
    norms = [np.linalg.norm(x[0], axis=-1)]
    for block in model.blocks.layers:
        x = block(x, causal_mask(ids.shape[1]))
        norms.append(np.linalg.norm(x[0], axis=-1))
    again = model.embed.attend(model.blocks.norm(x))
    np.testing.assert_allclose(again, logits, rtol=1e-4, atol=1e-3)
    shipped_norms = np.array(residual["trophy-big"]["norms"])
    assert shipped_norms.shape == (len(model.blocks.layers) + 1, ids.shape[1])
    np.testing.assert_allclose(shipped_norms, np.stack(norms), rtol=1e-5, atol=0.005 + 1e-3)
    # The next token after the first prompt: the TOP_N highest logits, highest first.
    row = nxt["capital"]
    z = model(np.array([tokenizer.encode(row["prompt"])]))[0, -1].astype(np.float64)
    top = np.argsort(-z, kind="stable")[: hook.TOP_N]
    assert row["ids"][:20] == top[:20].tolist()  # (further down, near-ties may swap)
    np.testing.assert_allclose(row["logits"], z[row["ids"]], rtol=0, atol=LOGIT_ATOL)
    assert np.all(np.diff(row["logits"]) <= 0)
    assert z[row["ids"][-1]] >= np.sort(z)[-hook.TOP_N] - LOGIT_ATOL
    p = np.exp(z - z.max())
    assert row["mass"] == pytest.approx(p[row["ids"]].sum() / p.sum(), abs=1e-4)


def test_character_model_logits_shipped_are_the_packages(built_site):
    from transformer_np.examples.charlm import CharVocab, load_text, load_trained

    model, _ = load_trained()
    vocab = CharVocab(load_text())
    for key, row in shipped(built_site, "next")["next"]["charlm"].items():
        z = model(vocab.encode(row["prompt"])[None, :])[0, -1]  # (V,)
        assert len(row["ids"]) == len(vocab.chars) == z.size, key
        assert row["tokens"] == [vocab.chars[i] for i in row["ids"]], key
        np.testing.assert_allclose(row["logits"], z[row["ids"]], rtol=0, atol=LOGIT_ATOL)


# --------------------------------------------------------------------------------------------
# The browser


@pytest.fixture(scope="module")
def shots() -> Path:
    """The folder of this module's screenshots, emptied once."""
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    return SHOTS


class Opener:
    """``opened(lang, **context)``: the page in that language, in a new browser context. The
    browser is started by :func:`own_playwright`, in the test's own thread."""

    def __init__(self, site_url):
        self.site_url = site_url
        self.browser = None

    def __call__(self, lang, **context):
        return Page(self.browser, self.site_url, lang, **context)


@pytest.fixture
def opened(site_url, shots):
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium not found: `make test` installs Debian's chromium package")
    return Opener(site_url)


def own_playwright(test):
    """Run a browser test in a thread of its own, with its own Playwright and Chromium.

    Playwright's sync API allows one instance per thread, and test_browser.py keeps its own open
    in the main thread for the whole session (its ``browser`` fixture)."""

    @functools.wraps(test)
    def run(*args, opened, **kwargs):
        from playwright.sync_api import sync_playwright

        failure = []

        def target():
            try:
                with sync_playwright() as p:
                    opened.browser = p.chromium.launch(
                        executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                    )
                    try:
                        test(*args, opened=opened, **kwargs)
                    finally:
                        opened.browser.close()
            except BaseException as exc:  # re-raised in pytest's thread, assertion or not
                failure.append(exc)

        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
        if failure:
            raise failure[0]

    return run


class Page:
    """The page in one language, in a context that blocks and counts every request that does
    not go to 127.0.0.1 and records every console error."""

    def __init__(self, browser, site_url, lang, **context):
        self.blocked: list[str] = []
        self.errors: list[str] = []
        context.setdefault("viewport", {"width": 1280, "height": 900})
        self.context = browser.new_context(**context)
        self.context.route("**/*", self._route)
        self.page = page = self.context.new_page()
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        page.on(
            "response",
            lambda r: self.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
        )
        response = page.goto(site_url + page_url_path(lang, "look-inside.md"), wait_until="load")
        assert response is not None and response.ok
        page.wait_for_function(
            "() => document.querySelectorAll('.look-inside[data-ready]').length === 3",
            timeout=30_000,
        )
        # Material's header is fixed: out of the way of the screenshots of the views
        page.add_style_tag(content=".md-header { position: absolute !important; }")

    def _route(self, route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def view(self, name):
        return self.page.locator(f'.look-inside[data-view="{name}"]')

    def drawn(self, name) -> str:
        """What a view shows: its SVG and its readout."""
        return self.view(name).evaluate(
            "el => [...el.querySelectorAll('svg, .li-readout, .li-tokens')]"
            ".map(n => n.outerHTML).join('')"
        )

    def clean(self):
        assert not self.blocked, f"requests that left the site: {self.blocked}"
        assert not self.errors, f"console errors: {self.errors}"

    def close(self):
        self.context.close()


def data_of(built_site, name):
    return shipped(built_site, name)


@pytest.mark.browser
@own_playwright
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("lang", LANGS)
def test_every_view_renders_without_errors_or_outside_requests(opened, lang, scheme):
    page = opened(lang, color_scheme=scheme)
    body_scheme = page.page.evaluate("() => document.body.getAttribute('data-md-color-scheme')")
    assert body_scheme == {"light": "default", "dark": "slate"}[scheme]
    for name in VIEWS:
        view = page.view(name)
        assert view.locator("svg").count() >= 1, f"{lang}/{name}: nothing drawn"
        assert view.locator("select, input").count() >= 1, f"{lang}/{name}: no control"
        assert not view.locator(".li-missing").count(), f"{lang}/{name}: data missing"
        view.screenshot(path=str(SHOTS / f"{lang}-{name}-{scheme}.png"))
    # The words are the page's: the attention view's labels in this language.
    label = page.view("attention").locator("label.li-control span").first.inner_text()
    assert label == {"it": "Modello", "en": "Model"}[lang]
    page.clean()


def _change(page, view, control, value):
    """Set a control of a view (a select, a range, a checkbox) the way a reader does."""
    target = page.view(view).locator(f'[data-control="{control}"]')
    kind = target.evaluate("el => el.type")
    if kind == "checkbox":
        target.check()
    elif kind == "range":
        target.fill(str(value))
    else:  # (Playwright's select_option matches labels too: "2" is also the label of "1")
        target.evaluate(
            "(el, v) => { el.value = v; el.dispatchEvent(new Event('change', {bubbles: true})); }",
            str(value),
        )
        assert target.input_value() == str(value)


CONTROLS = [
    ("attention", "model", "smollm2"),
    ("attention", "sentence", "maria"),
    ("attention", "layer", "3"),
    ("attention", "head", "5"),
    ("attention", "all", True),
    ("next", "prompt", "once"),
    ("next", "temperature", 0.5),
    ("next", "top-k", 5),
    ("next", "top-p", 0.5),
    ("next", "model", "charlm"),
    ("residual", "sentence", "numbers"),
]


@pytest.mark.browser
@own_playwright
@pytest.mark.parametrize("lang", LANGS)
def test_each_control_changes_the_view(opened, lang):
    page = opened(lang)
    for view, control, value in CONTROLS:
        before = page.drawn(view)
        _change(page, view, control, value)
        assert page.drawn(view) != before, f"{lang}: {view}'s {control} = {value} changed nothing"
    # Pointing at a token, with the mouse and then from the keyboard (Tab to it, arrows)
    for view in ("attention", "residual"):
        tokens = page.view(view).locator(".li-token")
        before = page.drawn(view)
        tokens.nth(2).hover()
        assert page.drawn(view) != before, f"{lang}: pointing at a token in {view} did nothing"
        tokens.nth(2).focus()
        pointed = page.view(view).locator(".li-readout").inner_text()
        page.page.keyboard.press("ArrowRight")
        assert page.view(view).locator(".li-token.li-pointed").get_attribute("data-i") == "3"
        assert page.view(view).locator(".li-readout").inner_text() != pointed
        focused = page.page.evaluate("() => document.activeElement.dataset.i")
        assert focused == "3", "the focus did not follow the arrow key"
    page.clean()


@pytest.mark.browser
@own_playwright
def test_attention_drawn_is_the_data(opened, built_site):
    data = data_of(built_site, "attention")
    page = opened("en")
    view = page.view("attention")
    cases = [
        ("minilm", "trophy-big", 0, 2),  # the previous-token head
        ("minilm", "numbers", 5, 11),
        ("smollm2", "trophy-big", 17, 4),
        ("smollm2", "zaino-piccolo", 16, 0),
    ]
    for model, sentence, layer, head in cases:
        _change(page, "attention", "model", model)
        _change(page, "attention", "sentence", sentence)
        _change(page, "attention", "layer", layer)
        _change(page, "attention", "head", head)
        svg = view.locator(f'.li-main svg[data-layer="{layer}"][data-head="{head}"]')
        assert svg.count() == 1, (model, sentence, layer, head)
        cells = svg.evaluate(
            "s => [...s.querySelectorAll('rect.li-cell')].map(r => "
            "[+r.dataset.i, +r.dataset.j, +r.getAttribute('fill-opacity'), "
            "r.classList.contains('li-masked')])"
        )
        w = hook.dequantise(data["attention"][model][sentence])[layer, head]  # (T, T)
        T = w.shape[0]
        drawn = np.zeros((T, T))
        assert len(cells) == T * T
        for i, j, opacity, masked in cells:
            assert masked == (model == "smollm2" and j > i)
            drawn[i, j] = 0.0 if masked else opacity
        np.testing.assert_allclose(drawn, w, atol=1e-4)
        # the strongest cell drawn is the head's argmax
        assert np.unravel_index(drawn.argmax(), drawn.shape) == np.unravel_index(
            w.argmax(), w.shape
        )
    # "All heads": one small map per head of the block, each that head's weights
    _change(page, "attention", "all", True)
    thumbs = view.locator(".li-grid svg")
    H = data["attention"]["smollm2"]["zaino-piccolo"]["shape"][1]
    assert thumbs.count() == H
    page.clean()


@pytest.mark.browser
@own_playwright
def test_next_token_bars_are_the_packages_probabilities(opened, built_site):
    from transformer_np.sampling import weights

    data = data_of(built_site, "next")["next"]
    page = opened("it")
    view = page.view("next")
    _change(page, "next", "prompt", "once")
    for t, k, p in [(1.0, 300, 1.0), (0.5, 300, 1.0), (1.5, 20, 1.0), (1.0, 300, 0.3)]:
        _change(page, "next", "temperature", t)
        _change(page, "next", "top-k", k)
        _change(page, "next", "top-p", p)
        z = np.array([data["smollm2"]["once"]["logits"]])
        expected = weights(z, t, None if k >= 300 else k, None if p >= 1 else p)[0]
        expected = expected / expected.sum()
        bars = view.locator("g.li-bar").evaluate_all(
            "gs => gs.map(g => [+g.dataset.token, +g.dataset.p, g.classList.contains('li-cut')])"
        )
        assert [b[0] for b in bars] == list(range(15))
        for i, shown, cut in bars:
            assert shown == pytest.approx(expected[i], rel=1e-5, abs=1e-12)
            assert cut == (expected[i] == 0)
    page.clean()


# The settings the arithmetic is compared on: temperature, top-k, top-p (None: no cut).
SETTINGS = [
    (1.0, None, None),
    (0.3, None, None),
    (2.0, None, None),
    (1.0, 1, None),
    (0.7, 10, None),
    (1.0, None, 0.9),
    (1.3, None, 0.5),
    (0.8, 40, 0.95),
    (1e-3, None, None),
]


@pytest.mark.browser
@own_playwright
def test_page_sampling_arithmetic_equals_the_packages(opened, built_site):
    from transformer_np.sampling import weights

    models = data_of(built_site, "next")["next"].values()
    rows = [row["logits"] for prompts in models for row in prompts.values()]
    # ties at the top-k threshold and at the top-p threshold, where the order of the sort counts
    rows += [[1.0, 2.0, 2.0, 3.0, 2.0, 0.5], [0.0, 0.0, 0.0, 0.0], [5.0, 1.0, 1.0, 1.0, 1.0]]
    page = opened("en")
    got = page.page.evaluate(
        "([rows, settings]) => rows.map(z => settings.map(([t, k, p]) => "
        "LookInside.probabilities(z, t, k, p)))",
        [rows, SETTINGS],
    )
    for z, per_setting in zip(rows, got, strict=True):
        for (t, k, p), js in zip(SETTINGS, per_setting, strict=True):
            w = weights(np.array([z]), t, k, p)[0]
            expected = w / w.sum()
            js = np.array(js)
            assert np.array_equal(js > 0, expected > 0), (z[:5], t, k, p)
            np.testing.assert_allclose(js, expected, rtol=1e-12, atol=1e-300)
    page.clean()


@pytest.mark.browser
@own_playwright
def test_views_fit_a_phone(opened):
    page = opened("it", viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    overflow = page.page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1, f"the page is {overflow} px wider than the phone"
    for name in VIEWS:
        box = page.view(name).bounding_box()
        assert box is not None and box["width"] <= 390
        page.view(name).screenshot(path=str(SHOTS / f"it-{name}-phone.png"))
    page.clean()
