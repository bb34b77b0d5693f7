// MathJax 3 configuration for pymdownx.arithmatex (generic mode) and for notebooks.
// MathJax itself is served from this site (assets/mathjax/), never from a CDN.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    // Typeset only formulas: arithmatex output, and the rendered Markdown cells of notebooks
    // (mkdocs-jupyter keeps their raw $...$). Everything under Material's header and container is
    // ignored unless it sits inside one of those. (Material's usual `ignoreHtmlClass: ".*|"` would
    // also ignore the <p> inside a notebook cell: an ignored class is checked on every element.)
    ignoreHtmlClass: "md-header|md-container",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown|jp-MarkdownOutput",
  },
};

// Material emits document$ once per page load (and on instant navigation, if enabled).
// Do not call MathJax.startup.output.clearCache() here: with instant navigation it blanks formulas.
// On the first load MathJax typesets the page by itself when it is ready (typesetPromise does
// not exist yet at that moment); on later emissions the page content is new and is typeset here.
document$.subscribe(() => {
  if (window.MathJax && typeof MathJax.typesetPromise === "function") {
    MathJax.typesetClear();
    MathJax.texReset();
    MathJax.typesetPromise();
  }
});
