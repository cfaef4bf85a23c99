"""A fit's plan as text (``str(FitPlan)``, what ``dask-dppca plan`` prints)."""

from __future__ import annotations

from typing import Any

from .formatting import format_bytes, format_seconds

__all__ = ["fit_plan_text"]


def fit_plan_text(plan: Any) -> str:
    """``str(plan)`` of a :class:`~dask_dppca.planning.fit_plan.FitPlan`: the plan as lines
    a person reads, its problems last (the plan's fields only: no import of the planner).
    """
    i, c, g, m, t, p = plan.input, plan.cluster, plan.graph, plan.memory, plan.time, plan.privacy
    n, d = i["shape"]
    where = i["location"] or i["type"]
    chunks = i["row_chunks"]
    chunk_text = (
        "in memory"
        if chunks is None
        else f"{chunks['count']} row chunks (largest {chunks['largest']})"
    )
    des = plan.design
    name = des["design"]
    if name == "regular":
        name += (
            f" (k={des['partners_k']}, blocks of {des['block_size']} rows, "
            f"seed {des['design_seed']})"
        )
    lines = [
        f"plan for {where}: {n} x {d} {i['dtype']}, {chunk_text}, {i['codec']} on {i['storage']}",
        f"cluster: {c.workers} worker(s) x {c.threads_per_worker} thread(s), memory limit "
        f"{format_bytes(c.memory_limit)} ({c.source})",
        f"design: {name}, from design={des['chosen_by']!r}: {des['n_blocks']} blocks of at most "
        f"{des['block_rows']} rows, {des['n_block_pairs']} block pairs, {des['n_pairs']:.4g} "
        f"record pairs, max degree {des['max_degree']}",
        _graph_line(g),
        f"read: {format_bytes(plan.bytes_read)} "
        + (
            f"(inside the tasks: {g['block_reads']} block reads, "
            f"{g['rows_decoded'] / max(n, 1):.3g}x the rows decoded)"
            if g["reads_in_tasks"]
            else "(in the input's own tasks)"
        ),
        _memory_line(m),
        f"time: {format_seconds(t['wall_seconds'])} = {format_seconds(t['makespan_seconds'])} "
        f"pair work and reads on {c.n_threads} thread(s) + {g['n_tasks']} tasks "
        f"{format_seconds(t['task_seconds'])} + fixed {format_seconds(t['fixed_seconds'])} "
        f"(kernel {t['pairs_per_second_per_core']:.3g} pairs/s a core, reads "
        f"{format_bytes(t['read_bytes_per_second'])}/s a thread; machine "
        f"model: {t['machine_model']})",
        f"privacy: epsilon {p['epsilon']:g}, delta {p['delta']:g} ({p['calibration']}), "
        f"sensitivity {p['sensitivity']:.4g}, sigma {p['sigma']:.4g}",
    ]
    a = plan.accuracy
    if a is not None:
        if "note" in a:
            lines.append(f"accuracy: {a['note']}")
        else:
            lines.append(
                f"accuracy: sin theta median {a['sin_theta_p50']:.3g}, 90% {a['sin_theta_p90']:.3g}"
                f" (gap {a['gap']:.3g}; {a['model']})"
            )
    lines += [f"note: {note}" for note in plan.notes]
    lines.append("fits: yes" if plan.fits else "fits: NO")
    lines += [f"problem: {problem}" for problem in plan.problems]
    return "\n".join(lines)


def _graph_line(g: dict[str, Any]) -> str:
    """The plan text's graph line: the kernel's tasks, merges, inputs and release."""
    kernel = (
        f"{g['worker_tasks']} worker tasks (one a worker at a time, each "
        f"{g['worker_task_threads']} thread(s) adding into {g['worker_task_sums']} shared "
        f"sum(s), running {g['segment_tasks']} segments of"
        if g["worker_tasks"]
        else f"{g['segment_tasks']} segment tasks (running"
    )
    return (
        f"graph: {kernel} {g['block_pair_tasks']} block-pair groups) + {g['merge_tasks']} "
        f"merge + {g['input_tasks']} input + 1 release = {g['n_tasks']} tasks (scheduler "
        f"limit {g['scheduler_task_limit']})"
    )


def _memory_line(m: dict[str, Any]) -> str:
    """The plan text's memory line: a worker's peak and its parts."""
    return (
        f"memory per worker: peak {format_bytes(m['peak_bytes'])} = baseline "
        f"{format_bytes(m['parts']['baseline'])} + {m['running_tasks']} thread(s) x "
        f"{format_bytes(m['per_task_bytes'])}"
        + (f" + {m['shared_sums']} shared sum(s) and their total" if m["shared_sums"] else "")
        + f" + {m['segments_per_worker']} finished sum(s) "
        f"{format_bytes(m['parts']['segment_sums'])}"
        + (
            f" + the input in this process {format_bytes(m['parts']['input_in_process'])}"
            if m["parts"]["input_in_process"]
            else ""
        )
        + (
            ""
            if m["usable_bytes"] is None
            else f"; usable {format_bytes(m['usable_bytes'])} of the "
            f"{format_bytes(m['memory_limit'])} limit"
        )
    )
