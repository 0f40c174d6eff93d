"""The distcore web app's UI: one module per tab, the page shell, formatting, hosting workarounds.

    shell.py      the page: header, About, the four tabs, the poll timer, what a browser keeps
    setup.py      1 · Setup & split: the form, the batch note, Show split; the form a browser keeps
    train.py      2 · Train: start, stop, resume, a run's settings back into Setup, export
    watch.py      the run a page follows: its status, plots and log, and the run pickers
    evaluate.py   3 · Evaluate: restore a checkpoint and evaluate it
    loss.py       4 · Loss scaling
    format.py     markdown and HTML for people (errors, progress, a run's setup line)
    settings.py   what the app was started with (AppSettings), passed to every handler
    hosting.py    the temporary folder, port, malloc threshold, session cap, Gradio patches, SIGTERM
    static/       app.css and app.js, read when the app is built

Decisions (form -> TrainConfig -> command line, the job limit, which run to follow, the resume
rules, explanations) live in distcore and are tested there without Gradio. Nothing here imports
TensorFlow: training, evaluation and split plans run in `python -m distcore ...` subprocesses.
Importing this package imports nothing; hosting.prepare_environment runs before Gradio loads.
"""
