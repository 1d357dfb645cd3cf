"""The bodies the API answers about videos: a job as OpenAI's `Video`, why a job has no mp4,
and OpenAI's deleted object with what happens to the job."""

from __future__ import annotations

import json
import time


def progress_of(row: dict) -> int:
    """0 queued, 100 completed; in between, the share of denoising steps done (at most 99: the
    decode and the write follow the last step)."""
    if row["status"] == "completed":
        return 100
    return min(99, 100 * row["step"] // max(1, row["steps"]))


def video_object(row: dict, words, record: bool = True) -> dict:
    """A job as OpenAI's `Video` (every field the SDK's type needs), plus what we know besides:
    the step, whether it resumed, and once completed (`record`: not in lists) the sidecar's record.
    `words` (words.Words): its error and record as a client may read them — no server path."""
    video = {
        "id": row["id"],
        "object": "video",
        "model": row["model"],
        "status": row["status"],
        "progress": progress_of(row),
        "created_at": row["created_at"],
        "completed_at": row["completed_at"],
        "expires_at": row.get("expires_at"),  # keep_hours=: when the video and its record go
        "size": row["size"],
        "seconds": row["seconds"],
        "prompt": row["prompt"],
        "remixed_from_video_id": row.get("remixed_from"),
        "error": None,
        "step": row["step"],
        "steps": row["steps"],
        "resumed_from_step": row["resumed_from_step"],
        "user": row.get("user"),  # the request's bookkeeping, as sent
        "metadata": None if row.get("metadata") is None else json.loads(row["metadata"]),
    }
    if row["status"] == "failed":
        video["error"] = {"code": "generation_failed", "message": words.public(row["error"] or "failed")}
    if record and row["status"] == "completed" and row["record"]:
        video["record"] = words.record(json.loads(row["record"]))
    return video


POLL_MS = (250, 10_000)  # the bounds of the poll interval advised


def poll_after(row: dict, now: float | None = None) -> dict:
    """OpenAI's `openai-poll-after-ms` for an unfinished job (the SDK's poll() waits that long):
    while running, about one step's time so far (each GET then sees the next step); queued, a
    second; none once finished."""
    if row["status"] == "in_progress" and row["step"] > 0 and row["started_at"]:
        elapsed = (time.time() if now is None else now) - row["started_at"]
        ms = 1000 * elapsed / row["step"]
    elif row["status"] in ("queued", "in_progress"):
        ms = 1000
    else:
        return {}
    return {"openai-poll-after-ms": str(int(min(max(ms, POLL_MS[0]), POLL_MS[1])))}


def no_content(row: dict, words) -> str:
    """Why GET …/content has no mp4 for this job: not yet, or (failed) never."""
    if row["status"] == "failed":
        return (
            f"video {row['id']} failed ({words.public(row['error'] or 'no reason recorded')}): it has no mp4 and "
            "never will; send the request again to try once more"
        )
    if row["status"] == "completed":
        return f"video {row['id']} is completed but its mp4 is gone from the server"
    return f"video {row['id']} is {row['status']}; its mp4 is there once it is completed"


def deleted_object(video_id: str, had: str, row: dict | None) -> dict:
    """OpenAI's deleted object, answered at once, and a `message` saying what became of the job:
    from now on it is not found. A running job goes on only until its current step ends."""
    if had == "in_progress":
        step = f" (step {row['step']} of {row['steps']} done)" if row else ""
        message = (
            f"{video_id} was running{step}: it stops after its current step and nothing of it is kept; "
            "it is not found from now on"
        )
    elif had == "queued":
        message = f"{video_id} was queued: it will not run; it is not found from now on"
    else:
        message = f"{video_id} ({had}) and its files are deleted; it is not found from now on"
    return {"id": video_id, "object": "video.deleted", "deleted": True, "message": message}
