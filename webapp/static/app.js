() => {
  // The page's own script (webapp/shell.py passes it to launch()), run once at load, then at
  // every change of the page (MutationObserver):
  // - The answers to a button (a started run, a plan's notes, an evaluation) are live regions, so
  //   a screen reader announces them (Gradio's Markdown is none). Errors are role="alert".
  // - The log box is read-only rather than disabled, so a keyboard can reach it and scroll its
  //   long lines on a phone (Gradio sets disabled again at times: that is watched too).
  // - A Plotly plot Gradio removes is purged: Gradio mounts a new plot at every update of a
  //   gr.Plot and drops the old one without Plotly.purge, whose window resize handler would
  //   keep it, and a page following a training run would grow by megabytes a minute.
  const mark = () => {
    document.querySelectorAll('.dc-live:not([aria-live])').forEach(e => {
      e.setAttribute('role', 'status'); e.setAttribute('aria-live', 'polite'); });
    document.querySelectorAll('#dc-logs textarea[disabled]').forEach(t => { t.disabled = false; t.readOnly = true; });
  };
  const purge = records => records.forEach(r => r.removedNodes.forEach(n => {
    if (!(n instanceof Element) || !window.Plotly) return;
    const plots = n.matches('.js-plotly-plot') ? [n] : [...n.querySelectorAll('.js-plotly-plot')];
    setTimeout(() => plots.filter(g => !g.isConnected).forEach(g => window.Plotly.purge(g)), 0);
  }));
  mark();
  new MutationObserver(records => { mark(); purge(records); }).observe(document.body, {
    childList: true, subtree: true, attributes: true, attributeFilter: ['disabled']});
}
