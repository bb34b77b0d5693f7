/* The views of the page "Guarda dentro" / "Look inside", drawn with the vendored d3.
 *
 * A page holds <div class="look-inside" data-view="attention|next|residual" data-label-*="...">;
 * this script (loaded on every page, it does nothing where there is no such div) loads d3 and
 * the view's data from the site itself (assets/look-inside/<view>.json, computed at build time
 * by hooks/look_inside.py with the package) and draws the view. Every word shown comes from the
 * div's data-label-* attributes: the page's language.
 *
 * window.LookInside.weights/probabilities are the arithmetic of the next-token view, the same
 * as transformer_np.sampling.weights (top-k, then the temperature, then top-p).
 */
(function () {
  "use strict";

  const script = document.currentScript;
  const BASE = new URL(".", script ? script.src : window.location.href); // .../javascripts/
  const D3_URL = new URL("vendor/d3/d3.min.js", BASE).href;
  const dataUrl = (name) => new URL(`../assets/look-inside/${name}.json`, BASE).href;
  const N_BARS = 15; // tokens drawn in the next-token view

  // ------------------------------------------------------------------------------------------
  // The sampling arithmetic (transformer_np.sampling.weights, row by row)

  /** Un-normalised weights of the next token: the most probable has weight 1, a token cut by
   * top-k or top-p has weight 0. topK null (or >= V) and topP null (or >= 1): no cut. */
  function weights(logits, temperature, topK, topP) {
    const V = logits.length;
    const z = Float64Array.from(logits);
    // 1. top-k: the scores below the k-th largest are masked (ties at the threshold stay)
    if (topK != null && topK < V) {
      const sorted = Float64Array.from(z).sort(); // ascending
      const kth = sorted[V - topK];
      for (let i = 0; i < V; i++) if (z[i] < kth) z[i] = -Infinity;
    }
    // 2. temperature, after subtracting the maximum (exponents <= 0)
    let max = -Infinity;
    for (let i = 0; i < V; i++) if (z[i] > max) max = z[i];
    const p = new Float64Array(V);
    for (let i = 0; i < V; i++) {
      z[i] = (z[i] - max) / temperature;
      p[i] = Math.exp(z[i]);
    }
    // 3. top-p: from the least probable (a stable sort: ties by index), drop each token whose
    // probability, added to all those before it, is at most 1 - p; the best one always stays
    if (topP != null && topP < 1) {
      const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => z[a] - z[b] || a - b);
      let total = 0;
      for (let i = 0; i < V; i++) total += p[i];
      let mass = 0;
      const drop = [];
      for (let r = 0; r < V; r++) {
        mass += p[order[r]] / total;
        if (mass <= 1 - topP && r < V - 1) drop.push(order[r]);
      }
      for (const i of drop) p[i] = 0;
    }
    return p;
  }

  /** The probabilities of the next token: weights(...) normalised to sum 1. */
  function probabilities(logits, temperature, topK, topP) {
    const p = weights(logits, temperature, topK, topP);
    let total = 0;
    for (const x of p) total += x;
    return Array.from(p, (x) => x / total);
  }

  window.LookInside = { weights, probabilities };

  // ------------------------------------------------------------------------------------------
  // Helpers

  function loadScript(src) {
    if (window.d3) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = () => reject(new Error(`cannot load ${src}`));
      document.head.appendChild(s);
    });
  }

  const cache = {};
  function loadData(name) {
    if (!cache[name]) {
      cache[name] = fetch(dataUrl(name)).then((r) => {
        if (!r.ok) throw new Error(`${r.url}: HTTP ${r.status}`);
        return r.json();
      });
    }
    return cache[name];
  }

  function decode(b64) {
    const s = atob(b64);
    const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  /** A token as shown: a space as ␣, a new line as ⏎. */
  const show = (t) => t.replace(/ /g, "␣").replace(/\n/g, "⏎");
  const lang = () => document.documentElement.lang || "it";
  const fmt = (x, digits = 2) =>
    x.toLocaleString(lang(), { minimumFractionDigits: digits, maximumFractionDigits: digits });
  const pct = (x) => `${fmt(100 * x, 1)}%`;

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    for (const c of children) node.append(c);
    return node;
  }

  function control(label, input) {
    return el("label", { class: "li-control" }, el("span", {}, label), input);
  }

  function select(name, options) {
    const s = el("select", { "data-control": name });
    for (const [value, text] of options) s.append(el("option", { value: String(value) }, text));
    return s;
  }

  function range(name, min, max, step, value) {
    return el("input", { type: "range", "data-control": name, min, max, step, value });
  }

  /** A row of buttons, one per token, kept while the tokens stay the same: pointing at one
   * (mouse or focus) calls onPoint(i), the arrow keys move between them. strip.show(pointed,
   * shade) marks the pointed token and shades each token j by shade(j) in [0, 1]. */
  function tokenStrip(box, tokens, onPoint, label) {
    const key = JSON.stringify(tokens);
    if (box.firstChild && box.firstChild.dataset.key === key) return box.firstChild;
    const strip = el("div", { class: "li-tokens", role: "group", "aria-label": label });
    strip.dataset.key = key;
    tokens.forEach((t, i) => {
      const b = el("button", { type: "button", class: "li-token", "data-i": String(i) }, show(t));
      b.tabIndex = -1;
      b.addEventListener("mouseenter", () => onPoint(i));
      b.addEventListener("focus", () => onPoint(i));
      b.addEventListener("click", () => onPoint(i));
      b.addEventListener("keydown", (e) => {
        const step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[e.key];
        if (step === undefined) return;
        e.preventDefault();
        strip.children[Math.max(0, Math.min(tokens.length - 1, i + step))].focus();
      });
      strip.append(b);
    });
    strip.show = (pointed, shade) => {
      Array.from(strip.children).forEach((b, j) => {
        b.classList.toggle("li-pointed", j === pointed);
        b.tabIndex = j === (pointed ?? 0) ? 0 : -1;
        b.style.setProperty("--li-w", shade ? shade(j).toFixed(3) : "0");
      });
    };
    box.replaceChildren(strip);
    return strip;
  }

  function width(node, max) {
    return Math.max(240, Math.min(max, node.getBoundingClientRect().width || max));
  }

  // ------------------------------------------------------------------------------------------
  // 1. Attention, block by block and head by head

  function attentionEntry(data, model, key) {
    const e = data.attention[model][key];
    if (!e._codes) e._codes = decode(e.w);
    const [L, H, T] = e.shape;
    const tri = (T * (T + 1)) / 2;
    e.at = e.causal
      ? (l, h, i, j) => (j > i ? 0 : e._codes[(l * H + h) * tri + (i * (i + 1)) / 2 + j] / 255)
      : (l, h, i, j) => e._codes[((l * H + h) * T + i) * T + j] / 255;
    return e;
  }

  function heatmap(d3, e, l, h, pointed, size, opts) {
    const T = e.shape[2];
    const pad = opts.labels ? 90 : 2;
    const top = opts.labels ? 70 : 2;
    const cell = Math.max(4, Math.floor((size - pad) / T));
    const svg = d3
      .create("svg")
      .attr("class", "li-heatmap")
      .attr("width", pad + cell * T + 2)
      .attr("height", top + cell * T + 2)
      .attr("data-layer", l)
      .attr("data-head", h);
    if (opts.labels) {
      svg.attr("role", "img").attr("aria-label", opts.label);
      svg
        .append("g")
        .selectAll("text")
        .data(e.tokens)
        .join("text")
        .attr("class", (_, i) => "li-label" + (i === pointed ? " li-pointed" : ""))
        .attr("x", pad - 4)
        .attr("y", (_, i) => top + cell * i + cell / 2)
        .attr("text-anchor", "end")
        .attr("dominant-baseline", "middle")
        .text((t) => show(t));
      svg
        .append("g")
        .selectAll("text")
        .data(e.tokens)
        .join("text")
        .attr("class", (_, i) => "li-label" + (i === pointed ? " li-pointed" : ""))
        .attr("transform", (_, j) => `translate(${pad + cell * j + cell / 2},${top - 4}) rotate(-60)`)
        .text((t) => show(t));
    }
    const cells = [];
    for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) cells.push([i, j]);
    svg
      .append("g")
      .selectAll("rect")
      .data(cells)
      .join("rect")
      .attr("class", ([i, j]) => (e.causal && j > i ? "li-cell li-masked" : "li-cell"))
      .attr("x", ([, j]) => pad + cell * j)
      .attr("y", ([i]) => top + cell * i)
      .attr("width", cell - (cell > 6 ? 1 : 0))
      .attr("height", cell - (cell > 6 ? 1 : 0))
      .attr("data-i", ([i]) => i)
      .attr("data-j", ([, j]) => j)
      .attr("fill-opacity", ([i, j]) => (e.causal && j > i ? 1 : e.at(l, h, i, j).toFixed(4)))
      .on("mouseenter", opts.onPoint ? (_, [i]) => opts.onPoint(i) : null)
      .append("title")
      .text(([i, j]) => `${show(e.tokens[i])} → ${show(e.tokens[j])}: ${fmt(e.at(l, h, i, j))}`);
    if (pointed != null) {
      svg
        .append("rect")
        .attr("class", "li-outline")
        .attr("x", pad - 1)
        .attr("y", top + cell * pointed - 1)
        .attr("width", cell * T + 1)
        .attr("height", cell + 1);
      svg
        .append("rect")
        .attr("class", "li-outline li-outline-column")
        .attr("x", pad + cell * pointed - 1)
        .attr("y", top - 1)
        .attr("width", cell + 1)
        .attr("height", cell * T + 1);
    }
    return svg.node();
  }

  function attentionView(d3, root, data, L) {
    const models = Object.keys(data.attention);
    // first shown: block 0, head 2, MiniLM's previous-token head (the page's first example);
    // blocks and heads are counted from 0, as in the code
    const state = { model: models[0], layer: 0, head: 2 };
    state.sentence = Object.keys(data.attention[state.model])[0];
    state.all = false;
    state.pointed = null;

    const modelSel = select("model", models.map((m) => [m, L[m] || m]));
    const sentenceSel = select("sentence", []);
    const layerSel = select("layer", []);
    const headSel = select("head", []);
    const allBox = el("input", { type: "checkbox", "data-control": "all" });
    const controls = el(
      "div",
      { class: "li-controls" },
      control(L.model, modelSel),
      control(L.sentence, sentenceSel),
      control(L.layer, layerSel),
      control(L.head, headSel),
      el("label", { class: "li-control li-check" }, allBox, el("span", {}, L.allHeads))
    );
    const stripBox = el("div", { class: "li-strip" });
    const readout = el("p", { class: "li-readout", "aria-live": "polite" });
    const main = el("div", { class: "li-main", tabindex: "0", "aria-label": L.keys });
    const grid = el("div", { class: "li-grid" });
    root.append(controls, stripBox, readout, main, grid);

    function fillOptions() {
      const sentences = Object.keys(data.attention[state.model]);
      if (!sentences.includes(state.sentence)) state.sentence = sentences[0];
      const [Lz, H] = data.attention[state.model][state.sentence].shape;
      state.layer = Math.min(state.layer, Lz - 1);
      state.head = Math.min(state.head, H - 1);
      sentenceSel.replaceChildren(
        ...sentences.map((k) => el("option", { value: k }, data.sentences[k]))
      );
      layerSel.replaceChildren(
        ...d3.range(Lz).map((l) => el("option", { value: String(l) }, String(l)))
      );
      headSel.replaceChildren(
        ...d3.range(H).map((h) => el("option", { value: String(h) }, String(h)))
      );
      modelSel.value = state.model;
      sentenceSel.value = state.sentence;
      layerSel.value = String(state.layer);
      headSel.value = String(state.head);
    }

    function point(i) {
      if (state.pointed === i) return;
      state.pointed = i;
      draw();
    }

    function draw() {
      const e = attentionEntry(data, state.model, state.sentence);
      const T = e.shape[2];
      const { layer: l, head: h } = state;
      const p = state.pointed != null && state.pointed < T ? state.pointed : null;
      // the token strip: where the pointed token looks
      tokenStrip(stripBox, e.tokens, point, L.tokens).show(
        p,
        p == null ? null : (j) => e.at(l, h, p, j)
      );
      if (p != null) {
        const top = (values) =>
          values
            .map((w, j) => [w, j])
            .sort((a, b) => b[0] - a[0])
            .slice(0, 3)
            .map(([w, j]) => `${show(e.tokens[j])} ${fmt(w)}`)
            .join(", ");
        const looks = d3.range(T).map((j) => e.at(l, h, p, j));
        const looked = d3.range(T).map((i) => e.at(l, h, i, p));
        readout.textContent =
          `«${show(e.tokens[p])}» ${L.looksAt} ${top(looks)}; ` + `${L.lookedAtBy} ${top(looked)}.`;
      } else {
        readout.textContent = L.hint;
      }
      const label = `${L[state.model] || state.model}, ${L.layer} ${l}, ${L.head} ${h}`;
      main.replaceChildren(
        heatmap(d3, e, l, h, p, width(main, 560), { labels: true, label, onPoint: point })
      );
      main.setAttribute("aria-label", `${label}. ${L.keys}`);
      grid.replaceChildren();
      grid.hidden = !state.all;
      if (state.all) {
        const H = e.shape[1];
        const size = Math.min(150, Math.floor((width(grid, 720) - 8 * 3) / 4));
        for (let k = 0; k < H; k++) {
          const b = el("button", {
            type: "button",
            class: "li-thumb" + (k === h ? " li-selected" : ""),
            "data-head": String(k),
            "aria-pressed": String(k === h),
          });
          b.append(heatmap(d3, e, l, k, p, size, { labels: false }), el("span", {}, `${L.head} ${k}`));
          b.addEventListener("click", () => {
            state.head = k;
            headSel.value = String(k);
            draw();
          });
          grid.append(b);
        }
      }
      root.dataset.draws = String(Number(root.dataset.draws || 0) + 1);
    }

    modelSel.addEventListener("change", () => {
      state.model = modelSel.value;
      fillOptions();
      draw();
    });
    sentenceSel.addEventListener("change", () => {
      state.sentence = sentenceSel.value;
      state.pointed = null;
      draw();
    });
    layerSel.addEventListener("change", () => {
      state.layer = Number(layerSel.value);
      draw();
    });
    headSel.addEventListener("change", () => {
      state.head = Number(headSel.value);
      draw();
    });
    allBox.addEventListener("change", () => {
      state.all = allBox.checked;
      draw();
    });
    main.addEventListener("keydown", (ev) => {
      const step = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1 }[ev.key];
      if (step === undefined) return;
      ev.preventDefault();
      const T = data.attention[state.model][state.sentence].shape[2];
      point(state.pointed == null ? 0 : Math.max(0, Math.min(T - 1, state.pointed + step)));
    });
    fillOptions();
    draw();
  }

  // ------------------------------------------------------------------------------------------
  // 2. The next token

  function nextView(d3, root, data, L) {
    const models = Object.keys(data.next);
    const state = { model: models[0], temperature: 1, topK: null, topP: 1 };
    state.prompt = Object.keys(data.next[state.model])[0];
    const modelSel = select("model", models.map((m) => [m, L[m] || m]));
    const promptSel = select("prompt", []);
    const temp = range("temperature", 0.05, 2, 0.05, 1);
    const topK = range("top-k", 1, 300, 1, 300);
    const topP = range("top-p", 0.05, 1, 0.01, 1);
    const out = { temperature: el("output"), "top-k": el("output"), "top-p": el("output") };
    const controls = el(
      "div",
      { class: "li-controls" },
      control(L.model, modelSel),
      control(L.prompt, promptSel),
      control(L.temperature, el("span", { class: "li-range" }, temp, out.temperature)),
      control("top-k", el("span", { class: "li-range" }, topK, out["top-k"])),
      control("top-p", el("span", { class: "li-range" }, topP, out["top-p"]))
    );
    const readout = el("p", { class: "li-readout", "aria-live": "polite" });
    const chart = el("div", { class: "li-main" });
    root.append(controls, readout, chart);

    function fillOptions() {
      const prompts = data.next[state.model];
      if (!(state.prompt in prompts)) state.prompt = Object.keys(prompts)[0];
      promptSel.replaceChildren(
        ...Object.entries(prompts).map(([k, v]) => el("option", { value: k }, show(v.prompt)))
      );
      promptSel.value = state.prompt;
      modelSel.value = state.model;
      const n = prompts[state.prompt].logits.length;
      topK.max = String(n);
      if (state.topK == null || state.topK > n) {
        state.topK = null;
        topK.value = String(n);
      }
    }

    function draw() {
      const row = data.next[state.model][state.prompt];
      const n = row.logits.length;
      const p = probabilities(row.logits, state.temperature, state.topK, state.topP);
      out.temperature.value = fmt(state.temperature);
      out["top-k"].value = state.topK == null ? L.noCut : String(state.topK);
      out["top-p"].value = state.topP >= 1 ? L.noCut : fmt(state.topP);
      const kept = p.filter((x) => x > 0).length;
      readout.textContent =
        `${L.kept} ${kept} / ${n} ${L.tokensOf}` +
        (row.vocab > n ? ` (${L.topOf} ${row.vocab}: ${pct(row.mass)} ${L.ofMass})` : "") +
        `. ${L.best} «${show(row.tokens[0])}» ${pct(p[0])}.`;
      const bars = d3.range(Math.min(N_BARS, n));
      const w = width(chart, 640);
      const left = 110;
      const barH = 22;
      const x = d3.scaleLinear().domain([0, Math.max(...bars.map((i) => p[i]), 1e-9)]).range([0, w - left - 70]);
      const svg = d3
        .create("svg")
        .attr("class", "li-bars")
        .attr("width", w)
        .attr("height", barH * bars.length + 4)
        .attr("role", "img")
        .attr("aria-label", readout.textContent);
      const g = svg
        .selectAll("g")
        .data(bars)
        .join("g")
        .attr("class", (i) => (p[i] > 0 ? "li-bar" : "li-bar li-cut"))
        .attr("data-token", (i) => i)
        .attr("data-p", (i) => p[i].toPrecision(6))
        .attr("transform", (i) => `translate(0,${barH * i + 2})`);
      g.append("text")
        .attr("class", "li-label")
        .attr("x", left - 6)
        .attr("y", barH / 2)
        .attr("text-anchor", "end")
        .attr("dominant-baseline", "middle")
        .text((i) => show(row.tokens[i]));
      g.append("rect")
        .attr("x", left)
        .attr("y", 2)
        .attr("height", barH - 5)
        .attr("width", (i) => (p[i] > 0 ? Math.max(1, x(p[i])) : 0));
      g.append("text")
        .attr("class", "li-value")
        .attr("x", (i) => left + (p[i] > 0 ? Math.max(1, x(p[i])) : 0) + 5)
        .attr("y", barH / 2)
        .attr("dominant-baseline", "middle")
        .text((i) => (p[i] > 0 ? pct(p[i]) : L.cut));
      chart.replaceChildren(svg.node());
      root.dataset.draws = String(Number(root.dataset.draws || 0) + 1);
    }

    modelSel.addEventListener("change", () => {
      state.model = modelSel.value;
      fillOptions();
      draw();
    });
    promptSel.addEventListener("change", () => {
      state.prompt = promptSel.value;
      draw();
    });
    temp.addEventListener("input", () => {
      state.temperature = Number(temp.value);
      draw();
    });
    topK.addEventListener("input", () => {
      const k = Number(topK.value);
      state.topK = k >= Number(topK.max) ? null : k;
      draw();
    });
    topP.addEventListener("input", () => {
      state.topP = Number(topP.value);
      draw();
    });
    fillOptions();
    draw();
  }

  // ------------------------------------------------------------------------------------------
  // 3. The residual stream's norm, block by block

  function residualView(d3, root, data, L) {
    const rows = data.residual.smollm2;
    const state = { sentence: Object.keys(rows)[0], pointed: 0 };
    const sentenceSel = select(
      "sentence",
      Object.keys(rows).map((k) => [k, (data.sentences || {})[k] || rows[k].tokens.join("")])
    );
    const stripBox = el("div", { class: "li-strip" });
    const readout = el("p", { class: "li-readout", "aria-live": "polite" });
    const chart = el("div", { class: "li-main" });
    root.append(el("div", { class: "li-controls" }, control(L.sentence, sentenceSel)), stripBox, readout, chart);

    function point(i) {
      if (state.pointed === i) return;
      state.pointed = i;
      draw();
    }

    function draw() {
      const r = rows[state.sentence];
      const norms = r.norms; // (L + 1, T)
      const T = r.tokens.length;
      const p = Math.min(state.pointed, T - 1);
      tokenStrip(stripBox, r.tokens, point, L.tokens).show(p, null);
      const series = d3.range(T).map((t) => norms.map((row) => row[t]));
      const s = series[p];
      const peak = d3.maxIndex(s); // s[k]: after k blocks, i.e. after block k - 1
      const where = peak === 0 ? L.afterEmbedding : `${L.afterBlock} ${peak - 1}`;
      readout.textContent =
        `«${show(r.tokens[p])}»: ${L.afterEmbedding} ${fmt(s[0], 1)}; ` +
        `${L.max} ${fmt(s[peak], 0)} ${where}; ${L.atEnd} ${fmt(s[s.length - 1], 0)}.`;
      const w = width(chart, 680);
      const h = 300;
      const m = { left: 56, right: 12, top: 10, bottom: 36 };
      const x = d3.scaleLinear().domain([0, norms.length - 1]).range([m.left, w - m.right]);
      const y = d3
        .scaleLog()
        .domain([d3.min(norms.flat()) * 0.8, d3.max(norms.flat()) * 1.2])
        .range([h - m.bottom, m.top]);
      const svg = d3
        .create("svg")
        .attr("class", "li-lines")
        .attr("width", w)
        .attr("height", h)
        .attr("role", "img")
        .attr("aria-label", readout.textContent);
      svg
        .append("g")
        .attr("class", "li-axis")
        .attr("transform", `translate(0,${h - m.bottom})`)
        .call(d3.axisBottom(x).ticks(Math.min(10, norms.length - 1)));
      svg
        .append("g")
        .attr("class", "li-axis")
        .attr("transform", `translate(${m.left},0)`)
        .call(d3.axisLeft(y).ticks(5, "~s"));
      svg
        .append("text")
        .attr("class", "li-label")
        .attr("x", (m.left + w - m.right) / 2)
        .attr("y", h - 4)
        .attr("text-anchor", "middle")
        .text(L.xAxis);
      const line = d3
        .line()
        .x((_, k) => x(k))
        .y((v) => y(v));
      svg
        .append("g")
        .selectAll("path")
        .data(d3.range(T).sort((a, b) => (a === p) - (b === p))) // the pointed one on top
        .join("path")
        .attr("class", (t) => (t === p ? "li-line li-pointed" : "li-line"))
        .attr("data-token", (t) => t)
        .attr("d", (t) => line(series[t]))
        .on("mouseenter", (_, t) => point(t))
        .append("title")
        .text((t) => show(r.tokens[t]));
      chart.replaceChildren(svg.node());
      root.dataset.draws = String(Number(root.dataset.draws || 0) + 1);
    }

    sentenceSel.addEventListener("change", () => {
      state.sentence = sentenceSel.value;
      state.pointed = 0;
      draw();
    });
    draw();
  }

  // ------------------------------------------------------------------------------------------

  const VIEWS = { attention: attentionView, next: nextView, residual: residualView };
  const DATA = { attention: "attention", next: "next", residual: "residual" };

  /** The words of the view, from the div's data-label-* attributes: data-label-looks-at ->
   * L.looksAt, data-label-smollm2 -> L.smollm2 (a model's name). */
  function labels(root) {
    const L = {};
    for (const [k, v] of Object.entries(root.dataset)) {
      if (k.startsWith("label") && k.length > 5) L[k[5].toLowerCase() + k.slice(6)] = v;
    }
    return L;
  }

  function start() {
    const roots = document.querySelectorAll(".look-inside[data-view]");
    if (!roots.length) return;
    loadScript(D3_URL)
      .then(() =>
        Promise.all(
          Array.from(roots, (root) => {
            const view = root.dataset.view;
            const L = labels(root);
            return loadData(DATA[view]).then((data) => {
              root.replaceChildren();
              if (data.pending) {
                // a first, quick build of the site: the whole one computes the data
                root.append(el("p", { class: "li-missing" }, L.pending));
                root.dataset.ready = "1";
                return;
              }
              const needs = { attention: ["minilm", "smollm2"], residual: ["smollm2"], next: ["smollm2"] }[view];
              const missing = needs.filter((m) => data.missing && m in data.missing);
              if (missing.length) {
                root.append(el("p", { class: "li-missing" }, `${L.missing} (${missing.join(", ")})`));
              }
              const has = { attention: data.attention, next: data.next, residual: data.residual }[view];
              if (has && Object.keys(has).length) VIEWS[view](window.d3, root, data, L);
              root.dataset.ready = "1";
            });
          })
        )
      )
      .catch((err) => {
        console.error(`look-inside: ${err}`);
      });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
