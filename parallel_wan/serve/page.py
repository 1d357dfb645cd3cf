"""GET /: one page, no build step and nothing fetched from elsewhere — a form for a request, the
queue with each job's live progress (polled from GET /v1/videos), the chosen running job's preview
(its thumbnail variant), a player for finished videos.
It speaks only the public API, so what it shows is what a client sees."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>parallel_wan</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 60em; padding: 0 1em; color: #222; }
  form { display: grid; grid-template-columns: 9em 1fr; gap: .4em .8em; align-items: center; }
  textarea { height: 3.5em; }
  button { width: 10em; }
  td button { width: auto; margin-right: .3em; }
  #message { color: #b00; min-height: 1.4em; grid-column: 1 / 3; }
  table { border-collapse: collapse; width: 100%; margin: 1em 0; }
  td, th { border-bottom: 1px solid #ddd; padding: .3em .5em; text-align: left; }
  tr.chosen { background: #eef4ff; }
  progress { width: 8em; }
  video, #preview { max-width: 100%; background: #000; }
  #preview { display: block; image-rendering: pixelated; margin-bottom: .5em; }
</style>
</head>
<body>
<h1>parallel_wan</h1>
<p id="served">…</p>
<form id="create">
  <label for="prompt">prompt</label><textarea id="prompt" name="prompt" required></textarea>
  <label for="size">size (WxH)</label><input id="size" name="size" placeholder="the model's default">
  <label for="num_frames">frames (4k+1)</label><input id="num_frames" name="num_frames" type="number" min="1">
  <label for="num_inference_steps">steps</label>
  <input id="num_inference_steps" name="num_inference_steps" type="number" min="1">
  <label for="seed">seed</label><input id="seed" name="seed" type="number" min="0">
  <label for="input_reference">image</label>
  <input id="input_reference" name="input_reference" type="file" accept="image/*">
  <label for="last_image" hidden>last frame</label>
  <input id="last_image" name="last_image" type="file" accept="image/*" hidden>
  <label for="audio_reference" hidden>speech</label>
  <input id="audio_reference" name="audio_reference" type="file" accept="audio/*" hidden>
  <label for="pose_video" hidden>pose video</label>
  <input id="pose_video" name="pose_video" type="file" accept="video/*" hidden>
  <label for="face_video" hidden>face video</label>
  <input id="face_video" name="face_video" type="file" accept="video/*" hidden>
  <label for="mode" hidden>mode</label>
  <select id="mode" name="mode" hidden><option>animate</option><option>replace</option></select>
  <label for="background_video" hidden>background video</label>
  <input id="background_video" name="background_video" type="file" accept="video/*" hidden>
  <label for="mask_video" hidden>mask video</label>
  <input id="mask_video" name="mask_video" type="file" accept="video/*" hidden>
  <span></span><button id="submit" type="submit">make the video</button>
  <div id="message"></div>
</form>
<table>
  <thead><tr><th>video</th><th>prompt</th><th>status</th><th>progress</th><th></th></tr></thead>
  <tbody id="queue"></tbody>
</table>
<img id="preview" alt="" hidden>
<video id="player" controls muted playsinline></video>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let chosen = null;
let canExtend = false;  // the served model continues videos (image-to-video): GET /v1/models' extends

async function api(path, options) {
  const answer = await fetch(path, options);
  const body = (answer.headers.get("content-type") || "").startsWith("application/json") ? await answer.json() : null;
  if (!answer.ok) throw new Error(body && body.error ? body.error.message : answer.status + " " + answer.statusText);
  return body;
}

function choose(video) {
  chosen = video.id;
  const src = "/v1/videos/" + video.id + "/content";
  if (video.status === "completed" && !$("player").src.endsWith(src)) {
    $("player").src = src;
    $("player").load();
  }
  // while it runs: the latest preview (a false-colour view of the step's latents; README), asked
  // for again with every poll; 404 until the loop made the first one
  const preview = $("preview");
  preview.hidden = video.status !== "in_progress";
  if (!preview.hidden) preview.src = src + "?variant=thumbnail&t=" + Date.now();
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.appendChild(td);
  return td;
}

function render(videos) {
  const body = $("queue");
  body.textContent = "";
  for (const video of videos) {
    const row = document.createElement("tr");
    row.dataset.id = video.id;
    row.className = video.id === chosen ? "chosen" : "";
    cell(row, video.id.slice(0, 14) + "…");
    cell(row, video.prompt);
    cell(row, video.status).className = "status";
    const bar = cell(row, "");
    bar.className = "progress";
    bar.dataset.value = video.progress;
    const meter = document.createElement("progress");
    meter.max = 100;
    meter.value = video.progress;
    bar.appendChild(meter);
    bar.append(" " + video.progress + "%");
    const act = cell(row, "");
    const button = document.createElement("button");
    const running = video.status === "queued" || video.status === "in_progress";
    button.textContent = running ? "cancel" : "delete";
    button.onclick = (e) => { e.stopPropagation(); api("/v1/videos/" + video.id, {method: "DELETE"}).then(poll); };
    act.appendChild(button);
    if (video.status === "completed") {
      // a new video from this one: its settings and seed, the prompt now in the form (README "Serving")
      const again = document.createElement("button");
      again.textContent = "remix";
      again.className = "remix";
      again.onclick = (e) => { e.stopPropagation(); remix(video, "/v1/videos/" + video.id + "/remix", {}); };
      act.appendChild(again);
      if (canExtend) {  // an image-to-video server: continue it from its last frame, as long again
        const more = document.createElement("button");
        more.textContent = "extend";
        more.className = "extend";
        const seconds = String(2 * parseFloat(video.seconds));
        more.onclick = (e) => {
          e.stopPropagation();
          remix(video, "/v1/videos/extensions", {video: {id: video.id}, seconds: seconds});
        };
        act.appendChild(more);
      }
    }
    row.onclick = () => choose(video);
    body.appendChild(row);
    if (video.id === chosen) choose(video);
  }
}

async function remix(video, path, fields) {
  const prompt = $("prompt").value.trim();
  $("message").textContent = "";
  if (!prompt) { $("message").textContent = "write the new prompt above first"; return; }
  try {
    const made = await api(path, {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(Object.assign({prompt: prompt}, fields)),
    });
    chosen = made.id;
    poll();
  } catch (e) {
    $("message").textContent = e.message;
  }
}

async function poll() {
  try {
    render((await api("/v1/videos?limit=20")).data);
  } catch (e) {
    $("message").textContent = e.message;
  }
}

// the files a request may carry (GET /v1/models' inputs shows the ones this model takes)
const FILES = ["input_reference", "last_image", "audio_reference", "pose_video", "face_video",
               "background_video", "mask_video"];

$("create").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData();
  for (const name of ["prompt", "size", "num_frames", "num_inference_steps", "seed"]) {
    const value = $(name).value.trim();
    if (value !== "") form.append(name, value);
  }
  if (!$("mode").hidden) form.append("mode", $("mode").value);
  for (const name of FILES) {
    const file = $(name).files[0];
    if (file) form.append(name, file);
  }
  $("message").textContent = "";
  try {
    const video = await api("/v1/videos", {method: "POST", body: form});
    chosen = video.id;
    poll();
  } catch (e) {
    $("message").textContent = e.message;
  }
});

api("/v1/models").then((m) => {
  $("served").textContent = "model: " + m.data[0].id;
  canExtend = m.data[0].extends === true;
  // a field per input the model takes (GET /v1/models' inputs): the last frame only where the
  // model makes first-last-frame videos; an image the model needs is required before submitting
  for (const input of m.data[0].inputs || []) {
    const field = $(input.field);
    if (!field) continue;
    field.hidden = false;
    document.querySelector(`label[for="${input.field}"]`).hidden = false;
    field.required = input.required;
    if (input.field === "background_video") {  // Animate: replace mode takes a background and a mask
      $("mode").hidden = false;
      document.querySelector('label[for="mode"]').hidden = false;
    }
  }
}).catch(() => {});
poll();
setInterval(poll, 500);
</script>
</body>
</html>
"""
