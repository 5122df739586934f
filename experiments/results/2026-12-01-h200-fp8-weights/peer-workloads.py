"""Same workloads, same script, either engine: ENGINE=nanovllm|nvllm MODEL=DIR python nano_workloads.py bench|single|prefix.
Both engines take the nano-vLLM API (LLM(path, enforce_eager=..., max_model_len=...), generate(token_id_lists, params))."""
import importlib, os, sys, time
from random import randint, seed
def main():
    t0 = time.time()
    engine = importlib.import_module(os.environ.get("ENGINE", "nanovllm"))
    LLM, SamplingParams = engine.LLM, engine.SamplingParams
    path = os.environ["MODEL"]
    tp = int(os.environ.get("TP", "1"))
    kw = dict(item.split("=", 1) for item in os.environ.get("KW", "").split(",") if item)
    kw = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in kw.items()}
    llm = LLM(path, enforce_eager=os.environ.get("EAGER") == "1", max_model_len=4096, tensor_parallel_size=tp, **kw)
    print(f"startup {time.time()-t0:.1f}s", flush=True)
    llm.generate(["Benchmark: "], SamplingParams(), use_tqdm=False)
    mode = sys.argv[1]
    seed(0)
    if mode == "single":
        p = [[randint(0, 10000) for _ in range(128)]]
        sp = SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=1024)
        t = time.time(); llm.generate(p, sp, use_tqdm=False); dt = time.time() - t
        print(f"single-stream: 1024 tok in {dt:.2f}s = {1024/dt:.1f} tok/s", flush=True)
    elif mode == "prefix":
        # PREFIXES distinct prefixes of PREFIX_LEN tokens, REQS requests each, suffix U[16, SUFFIX], output U[OUT_MIN, OUT_MAX]
        env = lambda k, d: int(os.environ.get(k, d))
        heads = [[randint(0, 10000) for _ in range(env("PREFIX_LEN", 1536))] for _ in range(env("PREFIXES", 1))]
        p = [h + [randint(0, 10000) for _ in range(randint(16, env("SUFFIX", 128)))] for h in heads for _ in range(env("REQS", 384))]
        sps = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=randint(env("OUT_MIN", 64), env("OUT_MAX", 512))) for _ in p]
        t = time.time(); llm.generate(p, sps, use_tqdm=False); dt = time.time() - t
        tot = sum(s.max_tokens for s in sps)
        print(f"shared-prefix: {tot} out tok, {sum(map(len,p))} in tok, {dt:.2f}s = {tot/dt:.1f} out tok/s, {(tot+sum(map(len,p)))/dt:.1f} total tok/s", flush=True)
    elif mode == "bench":
        prompts = [[randint(0, 10000) for _ in range(randint(100, 1024))] for _ in range(256)]
        sps = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=randint(100, 1024)) for _ in range(256)]
        t = time.time(); llm.generate(prompts, sps, use_tqdm=False); dt = time.time() - t
        tot = sum(s.max_tokens for s in sps)
        print(f"bench: {tot} tok {dt:.2f}s = {tot/dt:.1f} tok/s", flush=True)
    elif mode == "greedy":  # first tokens of greedy generations, to compare TP sizes or engines by eye
        p = [[randint(0, 10000) for _ in range(n)] for n in (5, 50, 500, 1500)]
        outs = llm.generate(p, SamplingParams(temperature=1e-5 if engine.__name__ == "nanovllm" else 0, ignore_eos=True, max_tokens=8), use_tqdm=False)
        print("greedy:", [o["token_ids"] for o in outs], flush=True)


if __name__ == "__main__":  # TP workers are spawned and re-import this module
    main()
