// The site's search ranking (Sphinx's html_search_scorer): Sphinx's own weights, and one rule of this site.
// Pages that only list other pages (the home page, the figure gallery, the list of papers, the notebooks' index)
// name every notebook and method in their titles and links, so they matched every query near the top; they now
// rank below the pages that explain the query (a notebook, the methods page, a paper's own page).
var Scorer = {
  score: (result) => {
    const [docname, , , , score] = result;
    return HUBSITE_LIST_PAGES.has(docname) ? score - 20 : score;
  },
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};
var HUBSITE_LIST_PAGES = new Set(["index", "gallery", "published/index", "notebooks/README"]);
