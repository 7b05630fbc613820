#!/bin/sh
# setup.sh — the virtual environment of the peer benchmark (bench/peers/peers.py): torch,
# transformers, accelerate and deepspeed from PyPI at the versions in requirements.txt,
# in build/peers-venv (or $PEERS_VENV).  Dev-time only; `make test` never needs it.
#
#   bench/peers/setup.sh            # about 5 GB (torch's PyPI wheel)
set -eu
cd "$(dirname "$0")/../.."
venv=${PEERS_VENV:-build/peers-venv}
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -r bench/peers/requirements.txt
DS_ACCELERATOR=cpu "$venv/bin/python" -c 'import torch, transformers, accelerate, deepspeed; print("peers:", "torch", torch.__version__, "transformers", transformers.__version__, "accelerate", accelerate.__version__, "deepspeed", deepspeed.__version__)'
