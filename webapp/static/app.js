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
  // - A plot is fitted to its box whenever the box changes width (a column appearing beside it,
  //   as the GAN's image grid does, or its tab showing): Plotly refits only on a window resize.
  const fit = new ResizeObserver(entries => entries.forEach(entry => {
    const plot = entry.target.querySelector('.js-plotly-plot');
    if (plot && entry.contentRect.width > 0 && window.Plotly && plot._fullLayout) {
      Promise.resolve(window.Plotly.Plots.resize(plot)).catch(() => {});
    }
  }));
  const fitted = new WeakSet();
  const mark = () => {
    document.querySelectorAll('.dc-live:not([aria-live])').forEach(e => {
      e.setAttribute('role', 'status'); e.setAttribute('aria-live', 'polite'); });
    document.querySelectorAll('#dc-logs textarea[disabled]').forEach(t => { t.disabled = false; t.readOnly = true; });
    document.querySelectorAll('.js-plotly-plot').forEach(plot => {
      const box = plot.closest('.block');
      if (box && !fitted.has(box)) { fitted.add(box); fit.observe(box); }
    });
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
