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
    // (mkdocs-jupyter keeps their raw $...$).
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown|jp-MarkdownOutput|jp-RenderedHTMLCommon",
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
