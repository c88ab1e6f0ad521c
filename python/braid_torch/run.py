# SPDX-License-Identifier: Apache-2.0
"""torchrun, with Debian 12's start-up bug fixed: python3 -m braid_torch.run [torchrun args]

PyTorch 1.13's torchrun parses --redirects and --tee by looking the number up among the
members of an IntFlag; on Python 3.11 that iteration leaves out 0 (NONE) and 3 (ALL), so
the defaults parse to None and every launch fails with "AttributeError: 'NoneType' object
has no attribute 'get'". This module replaces that parser with one that builds the flag
from the number, then runs torch.distributed.run.main() unchanged. Where torchrun parses
correctly (other Python or PyTorch versions) it changes nothing.
"""
import re

from torch.distributed import run as _torchrun
from torch.distributed.elastic.multiprocessing import api as _mp_api


def _parse_std(cls, text):
    if re.fullmatch(r"[0-3]", text):
        return cls(int(text))
    if re.fullmatch(r"(\d+:[0-3],)*\d+:[0-3]", text):
        return {int(k): cls(int(v)) for k, v in (m.split(":") for m in text.split(","))}
    raise ValueError(f"{text}: expected 0-3 or a mapping such as 0:3,1:0")


def _fix_std_parsing():
    std = _mp_api.Std
    if std.from_str("0") is None:
        std.from_str = classmethod(_parse_std)


def main(argv=None):
    _fix_std_parsing()
    _torchrun.main(argv)


if __name__ == "__main__":
    main()
