"""distcore: interactive distributed training with TensorFlow's tf.distribute.

Importing the package does not import TensorFlow (the web app imports it and
never touches TensorFlow itself); the modules that need TensorFlow import it.

Modules, one idea each:
  config       frozen, validated configuration (TrainConfig, SplitConfig, DistcoreError)
  devices      device discovery, device-set parsing, splitting a CPU into logical devices
  data         Fashion-MNIST from the original files (numpy)
  datasets     a run's data: Fashion-MNIST, MNIST, the user's arrays or .npz (checked)
  tasks        what a step does: the classifier, the GAN, the user's own Task
  trainer      distcore.train: a task on data in a run folder, in one call
  inputs       tf.data pipelines, TFRecord shards, the two distribute APIs
  split        split plans: which ids each replica receives, by running tf.distribute
  model        the tutorial CNN and the guide's MLP
  optimizer    FusedAdam: Keras's Adam as one fused kernel per variable
  loop         the inner loop: one replica step, N steps per tf.function call
  controller   the outer loop: when to log, test, checkpoint, stop
  stopping     stop requests (signals, StopFlag) and how a stopped process ends
  checkpoints  save, checked restore with fallback, evaluation on any device set
  events       TensorBoard event files of a run
  cluster      MultiWorkerMirroredStrategy: TF_CONFIG, and W local worker processes
  losscheck    the loss-scaling demonstration
  runs         run directories (config.json, metrics.jsonl, status.json, checkpoints/)
  jobs         background training processes and the planner service (for the app)
  plots        plotly figures from plain data
  bench        `python -m distcore bench`: throughput against the tutorial and Keras fit
  cli          `python -m distcore` and the `distcore` command
  settings     every environment variable distcore reads: name, default, meaning

The public API, each name documented on its object (`help(distcore.Controller)`):
  TrainConfig, SplitConfig, DistcoreError   configuration and the error for people
  train, Run                                train a task on data in a run folder, in this process
  Task, Classifier, GAN, StepContext        what a step does: built in, or your own subclass
  Arrays, Datasets                          your own data: numpy arrays, or tf.data pipelines
  Controller, StopFlag                      train a run; ask it to stop
  configure_devices                         split the CPU into logical devices (call first)
  plan_split                                which example ids each replica gets
  evaluate                                  a checkpoint's accuracy on any device set
  export                                    a checkpoint's model as a .keras file or SavedModel
  loss_check                                one batch's loss, single device vs distributed
Names other than the configuration load their module (and TensorFlow) on first use.
"""

from importlib import import_module as _import_module

from .config import DistcoreError, SplitConfig, TrainConfig

__version__ = "0.1.0"

# Public name -> (module, name in it). Resolved on first access (PEP 562), so that
# `import distcore` loads no TensorFlow: the app and the CLI's launchers import it.
_LAZY = {
    "Controller": ("controller", "Controller"),
    "StopFlag": ("stopping", "StopFlag"),
    "configure_devices": ("devices", "configure"),
    "plan_split": ("split", "plan"),
    "evaluate": ("checkpoints", "evaluate"),
    "export": ("checkpoints", "export"),
    "train": ("trainer", "train"),
    "Run": ("trainer", "Run"),
    "Arrays": ("datasets", "Arrays"),
    "Datasets": ("datasets", "Datasets"),
    "Task": ("tasks", "Task"),
    "StepContext": ("tasks", "StepContext"),
    "Classifier": ("tasks", "Classifier"),
    "GAN": ("tasks", "GAN"),
    "loss_check": ("losscheck", "loss_check"),
}

__all__ = ["DistcoreError", "SplitConfig", "TrainConfig", *_LAZY]


def __getattr__(name: str):
    # Unknown names raise AttributeError, so `from distcore import split` still imports the module.
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_import_module(f".{module}", __name__), attribute)
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
