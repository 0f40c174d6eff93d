"""The distcore web app's UI: one module per tab, the page shell, formatting, hosting workarounds.

    shell.py      the page: header, About, the five tabs, the poll timer, what a browser keeps
    setup.py      1 · Split: the split explorer, the training fields; the form a browser keeps
    choices.py    the training form's task, data and model choices; an uploaded .npz checked and kept
    train.py      2 · Train: the dashboard; start, stop, resume, train more, export
    trainapi.py   2 · Train's actions as the API names them, with their answers as plain values
    watch.py      the run a page follows: its status, plots and log, its buttons, and the run pickers
    evaluate.py   3 · Evaluate: restore a checkpoint, evaluate it, and compare the evaluations
    loss.py       4 · Loss scaling: each method's verdict
    compare.py    5 · Compare: runs overlaid, the runs table, a sweep, runs management (compareapi.py)
    format.py     markdown and HTML for people (errors, progress, a run's setup line)
    settings.py   what the app was started with (AppSettings), passed to every handler
    hosting.py    the temporary folder, port, malloc threshold, session cap, Gradio patches, SIGTERM
    static/       app.css and app.js, read when the app is built

Decisions (form -> TrainConfig -> command line, the job limit, which run to follow, the resume
rules, explanations) live in distcore and are tested there without Gradio. Nothing here imports
TensorFlow: training, evaluation and split plans run in `python -m distcore ...` subprocesses.
Importing this package imports nothing; hosting.prepare_environment runs before Gradio loads.
"""
