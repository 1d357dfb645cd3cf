"""Phase 4: the figures as BENCHMARKS.md rows, and the 8-GPU denoise predicted from them.

The prediction is benchmarks/comm.py's model (one rank's measured compute per layer plus the
communication its bytes take); the link is assumed (comm.LINKS, labelled so), since one GPU
measures no link. The rows follow the columns of BENCHMARKS.md's "GPU step (issue 7)" tables.
"""

from __future__ import annotations

import datetime
import statistics

from benchmarks import comm
from benchmarks.attention_speed import markdown as attention_rows, sparse_markdown as sparse_rows
from benchmarks.comm_volume import load_preset
from benchmarks.elementwise import markdown as elementwise_rows

from .correct import verdicts


def link_for(device_name: str | None) -> tuple[str, comm.Link]:
    name = device_name or ""
    key = "b200-nvlink" if "B200" in name else "h200-nvlink" if "H200" in name else "h100-nvlink"
    return key, comm.Link(**comm.LINKS[key], source=f"assumed {key}, not measured")


def prediction(steps: dict, dry_run: bool, device_name: str | None) -> dict:
    """Per mesh of comm.PRESETS: predicted A14B 720p step and denoise. Meshes with a step.py
    run here use its measured layer time; the others compute at the best measured rate (the
    dry run's tiny model measures no A14B mesh, so only that rate carries over)."""
    key, link = link_for(device_name)
    cfg, shape, tokens = comm.MODELS["a14b"]
    results = [s["step"] for s in steps.values()]
    measured = comm.measured_layers(results, "a14b")
    tflops = max(r["flops_per_forward"] / statistics.median(r["variants"][r["fastest_ours"]]) / 1e12 for r in results)
    preds = [comm.predict(load_preset(n), cfg, shape, tokens, link, measured.get(n), tflops) for n in comm.PRESETS]
    return {
        "link": key,
        "link_source": link.source,
        "rate_tflops": tflops,
        "measured_meshes": sorted(measured),
        "dry_run_note": "tiny-model rates on CPU: the code path, not a prediction" if dry_run else None,
        "meshes": {
            p.mesh: {
                "gpus": p.world,
                "compute_ms_layer": 1e3 * p.compute_layer_s,
                "compute_source": p.compute_source,
                "ulysses_ms_layer": 1e3 * p.ulysses_layer_s,
                "ring_exposed_ms_layer": 1e3 * p.ring_exposed_layer_s,
                "step_s": p.step_s,
                "denoise_s": p.denoise_s,
            }
            for p in preds
        },
    }


def rows(doc: dict, command: str, date: str) -> str:
    phases = doc["phases"]
    env = phases.get("environment", {})
    gpu = env.get("gpu") or {}
    if gpu:
        device = (
            f"{gpu['name']} (sm_{gpu['capability'].replace('.', '')}, {gpu['memory_gib']:.0f} GiB), "
            f"torch {env.get('torch')}, CUDA {env.get('cuda')}"
        )
    elif doc["dry_run"]:
        device = f"CPU dry run, torch {env.get('torch')}"
    else:  # --phases without environment (a later run into another folder): the step runs name the GPU
        device = step_device(phases) or f"{doc['device']} (the environment phase did not run)"
    out = [f"Device: {device}. Date: {date}. Command: `{command}`.", ""]
    if doc["dry_run"]:
        out += ["**Dry run on CPU (tiny model, tiny shapes): the code paths, not GPU figures.**", ""]
    checks = {n: verdicts(p) for n, p in phases.items() if n in ("videos", "kernels", "compiled", "fp8")}
    out.append(
        "Correctness: "
        + (
            "; ".join(f"{n}: {phases[n]['status']}" + (f", failed {bad}" if bad else "") for n, bad in checks.items())
            or "not run"
        )
        + "."
    )
    gemm = phases.get("gemm", {})
    if "dense" in gemm:
        fp8 = gemm.get("fp8")
        fp8_text = (
            f"; FP8 e4m3 (_scaled_mm) {max(r['tflops'] for r in fp8):.4g} TFLOP/s" if isinstance(fp8, list) else ""
        )
        out.append(f"GEMM peak: {gemm['dense']['dtype']} {gemm['dense']['peak_tflops']:.4g} TFLOP/s{fp8_text}.")
    out += [
        "",
        (
            "| device | date | model, mesh, tokens/rank | layers | matmul peak TFLOP/s | ours: variant "
            "| ours s/forward (scaled to 40 layers) | ours TFLOP/s | MFU | diffusers: backend | diffusers s (scaled) "
            "| diffusers / ours | attention kernel | host syncs / forward |"
        ),
        "|" + "---|" * 14,
    ]
    steps = {n: p for n, p in phases.items() if n.startswith("step_") and "summary" in p}
    for p in steps.values():
        r, s = p["step"], p["summary"]
        ours = s["variants"][s["fastest_ours"]]
        best = s["best_diffusers"]
        d = s["variants"][best] if best else None
        kernels = (
            r.get("kernel_variants_ran", {}).get(s["fastest_ours"])
            or sorted(set(r["kernels_used"].values()))
            or ["SDPA (no ring)"]
        )
        diff_s = f"{d['seconds']:.4g} ({d['full_depth_s']:.4g})" if d else "—"
        ratio = f"{s['diffusers_over_ours']:.2f}×" if d else "—"
        out.append(
            f"| {device.split(' (')[0].split(',')[0]} | {date} | {r['model']} {r['mesh']['name']}, {r['rows']} × "
            f"{r['local_tokens']:,} "
            f"| {r['layers']} | {s['peak_tflops']:.4g} | {s['fastest_ours']} | {ours['seconds']:.4g} "
            f"({ours['full_depth_s']:.4g}) | {ours['tflops']:.4g} | {100 * ours['mfu']:.1f} % "
            f"| {best or '—'} | {diff_s} | {ratio} "
            f"| {', '.join(kernels)} | {s['host_syncs']} (compiled: {s['host_syncs_compiled']}) |"
        )
    vae = phases.get("vae", {})
    if "bands" in vae:
        out += [
            "",
            (
                f"VAE decode ({vae['setup']['vae']}, latents {vae['setup']['latents']}, "
                f"{vae['setup']['frames']} frames, float32), rank 0's band:"
            ),
            "",
            "| ranks | latent rows | seconds | peak GB |",
            "|---|---|---|---|",
        ]
        for ranks, b in vae["bands"].items():
            peak = f"{b['peak_gb']:.2f}" if b["peak_gb"] is not None else "—"
            out.append(f"| {ranks} | {b['latent_rows']} | {b['seconds']:.3g} | {peak} |")
    kernels = phases.get("attention", {}).get("kernels")
    if kernels:
        out += ["", *attention_rows(kernels)]
    sparse = phases.get("attention", {}).get("sparse")
    if sparse:
        out += ["", *sparse_rows(sparse)]
    elementwise = phases.get("attention", {}).get("elementwise")
    if elementwise:
        out += ["", *elementwise_rows(elementwise)]
    load = phases.get("load", {}).get("rates")
    if load:
        out += [
            "",
            (
                f"Load from the page cache ({load['checkpoint_gb']:.2f} GB fp32, {load['layers']} layers): "
                f"read() {load['read_gbps']:.3g} GB/s, ours fp32 → bf16 {load['ours_fp32_to_bf16_gbps']:.3g} GB/s "
                f"({load['ours_vs_read']:.2f} of read())."
            ),
        ]
    lora = phases.get("load", {}).get("lora")
    if lora:
        from benchmarks.lora_placement import markdown as markdown_lora

        out += ["", *markdown_lora(lora)]
    whole = phases.get("whole_video", {}).get("video")
    if whole and "setup_s" in whole:
        from benchmarks.video import markdown as markdown_videos  # imports torch: only when there are rows

        out += ["", "Whole videos (benchmarks/video.py, one GPU, random weights at the real shapes):", ""]
        out += markdown_videos(whole).splitlines()
    pred = phases.get("written", {}).get("prediction")
    if pred:
        out += [
            "",
            f"Predicted T2V-A14B 720p denoise (benchmarks/comm.py's model, link {pred['link_source']}):",
            "",
            (
                "| device, link (measured / assumed) | date | mesh | compute ms/layer (measured / rate) | Ulysses "
                "ms/layer "
                "| ring exposed ms/layer | step s | denoise s (40 steps) | published |"
            ),
            "|" + "---|" * 9,
        ]
        for mesh, m in pred["meshes"].items():
            if m["gpus"] == 8 or mesh == "cp4":
                out.append(
                    f"| {device.split(',')[0]}, {pred['link']} assumed | {date} | {mesh} "
                    f"| {m['compute_ms_layer']:.3g} ({m['compute_source']}) | {m['ulysses_ms_layer']:.3g} "
                    f"| {m['ring_exposed_ms_layer']:.3g} | {m['step_s']:.3g} | {m['denoise_s']:.4g} | |"
                )
    bad = [n for n, p in phases.items() if p.get("status") not in ("ok", None)]
    if bad:
        out += [
            "",
            "Did not finish: " + "; ".join(f"{n} ({phases[n]['status']}: {phases[n].get('error', '')})" for n in bad),
        ]
    return "\n".join(out) + "\n"


def written(phase) -> None:
    """The prediction from the step phases that finished (phase.earlier)."""
    steps = {n: p for n, p in phase.earlier.items() if n.startswith("step_") and "step" in p}
    if not steps:
        phase.record("prediction", None)
        phase.record("note", "no step phase finished: nothing measured to predict from")
        return
    gpu = (phase.earlier.get("environment") or {}).get("gpu") or {}
    phase.record("prediction", prediction(steps, phase.dry_run, gpu.get("name") or step_device(phase.earlier)))


def step_device(phases: dict) -> str | None:
    """The device a step phase measured on, as benchmarks/step.py names it ("NVIDIA H200 (sm_90,
    140 GiB), CUDA 13.0, torch …"); None when no step phase ran."""
    for name, p in phases.items():
        if name.startswith("step_") and "step" in p:
            return f"{p['step']['device']}, torch {p['step'].get('torch')}"
    return None


def write_rows(doc: dict, path, argv: list[str]) -> None:
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    path.write_text(rows(doc, "python -m benchmarks.gpu_acceptance " + " ".join(argv), date))
