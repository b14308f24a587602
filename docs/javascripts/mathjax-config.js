// MathJax reads this before it loads (tex-chtml-full.js is listed after it in mkdocs.yml).
// pymdownx.arithmatex (generic mode) writes \( \) and \[ \] inside elements of class
// "arithmatex": typeset those only, so a dollar sign elsewhere in the pages stays text.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};
