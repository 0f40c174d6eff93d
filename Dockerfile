# The same recipe as the tested set-up (scripts/setup.sh): Debian's Fashion-MNIST
# package, a virtual environment at .venv, the pinned requirements, distcore itself
# (editable, as setup.sh installs it), then the app.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt .
RUN python -m venv .venv && .venv/bin/python -m pip install --no-cache-dir --upgrade pip \
 && .venv/bin/python -m pip install --no-cache-dir -r requirements.txt
COPY . .
RUN .venv/bin/python -m pip install --no-cache-dir --no-deps -e .

# Containers (and Hugging Face Spaces) must listen on all interfaces; a local
# `python app.py` keeps the loopback default. The FILE policy's TFRecord cache goes where
# any user can write: `docker run --user` has no home to put ~/.cache in.
ENV GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    DISTCORE_RUNS_DIR=/app/runs \
    DISTCORE_CACHE_DIR=/tmp/distcore-cache \
    DISTCORE_NO_DOWNLOAD=1
EXPOSE 7860
CMD [".venv/bin/python", "app.py"]
