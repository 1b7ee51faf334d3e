"""pipetop's side of a PyTorch training: profile an nn.Module for pipetop's
planners (python3 -m pipetop_torch.profile, which `pipetop profile --torch`
runs), cut a module where a pipetop plan cuts it (split), check a per-rank
schedule CSV (schedule), and label and stream a running pipeline's ops to
pipetop's console (Monitor). Needs torch and nothing else. docs/torch.md."""

from .chain import Chain, ChainError, load, run, split  # noqa: F401
from .monitor import Monitor, label  # noqa: F401

__version__ = "1"
