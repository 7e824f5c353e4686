// A notebook page opens with its code folded (one toggle per cell, myst-nb's "hide-input"); this button above the
// first code cell shows or folds every cell at once.
document.addEventListener("DOMContentLoaded", () => {
  const cells = Array.from(document.querySelectorAll("details.hide.above-input"));
  if (!cells.length) return;
  const button = document.createElement("button");
  button.className = "hubsite-code-toggle";
  button.type = "button";
  const label = () => { button.textContent = cells.every(d => d.open) ? "Fold all code" : "Show all code"; };
  button.addEventListener("click", () => {
    const open = !cells.every(d => d.open);
    cells.forEach(d => { d.open = open; });
    label();
  });
  cells.forEach(d => d.addEventListener("toggle", label));
  label();
  const first = cells[0].closest(".cell") || cells[0];
  first.parentNode.insertBefore(button, first);
});

// Search snippets: Sphinx takes a result's snippet from the page's [role=main] element, which in this theme also
// holds the sidebars and the theme switcher ("System Settings Light Dark ..."); take it from the article alone.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;
  const sphinxText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    const article = page.querySelector("article.bd-article");
    if (!article) return sphinxText(htmlString, anchor);
    article.querySelectorAll(".headerlink, script, style, summary").forEach((el) => el.remove());
    const part = anchor ? article.querySelector(anchor) : null;
    return (part || article).textContent;
  };
});
