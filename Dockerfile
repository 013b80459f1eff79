# dlcompare on CPU. Installs the project exactly as the README does.
FROM python:3.11-slim

# g++ for TorchInductor's C++ backend; git so results record the project's commit;
# jemalloc and tcmalloc for --allocator (the default, mimalloc, is a pip dependency).
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ git libjemalloc2 libtcmalloc-minimal4 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /dlcompare
COPY . .
# torch is pinned (==2.13.0) in pyproject.toml. Outside the machines this project was built
# on, point PIP_EXTRA_INDEX_URL at PyTorch's CPU wheel index to avoid the large CUDA build.
ARG PIP_EXTRA_INDEX_URL=""
RUN python -m venv .venv \
    && .venv/bin/python -m pip install --upgrade pip \
    && .venv/bin/python -m pip install -e '.[all,test]'

ENV PATH="/dlcompare/.venv/bin:${PATH}"
# The main job; results land in /dlcompare/reports/<timestamp>/ (mount a volume there).
CMD ["python", "-m", "compare", "--backends", "inductor,ort"]
