"""distcore: interactive distributed training with TensorFlow's tf.distribute.

Importing the package does not import TensorFlow (the web app imports it and
never touches TensorFlow itself); the modules that need TensorFlow import it.

Modules, one idea each:
  config       frozen, validated configuration (TrainConfig, SplitConfig, DistcoreError)
  devices      device discovery, device-set parsing, splitting a CPU into logical devices
  data         Fashion-MNIST from the original files (numpy)
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
  cli          `python -m distcore`
"""

from .config import DistcoreError, SplitConfig, TrainConfig

__all__ = ["DistcoreError", "SplitConfig", "TrainConfig"]
__version__ = "0.1.0"
