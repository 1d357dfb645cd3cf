"""GET / in a real browser (Debian's chromium, headless, driven by selenium through Debian's
chromedriver): a request submitted from the page's form, its progress moving in the queue, and
the <video> element loading the finished mp4, then its remix and extend buttons making new videos
from it."""

import os
import shutil
import time

import pytest
from harness.hold import Hold
from harness.serve import SETTINGS, Server

from parallel_wan.serve.store import Store

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.fixture
def browser(tmp_path):
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.exists(p) or shutil.which(p))]
    if missing:  # a failure, not a skip: the page is part of what the server ships
        pytest.fail(
            f"{', '.join(missing)} not found: install Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver; .ci/run does it)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_submit_from_the_page_see_progress_move_and_play_the_video(tmp_path, browser):
    from selenium.webdriver.common.by import By

    # The job holds before its step 3 of 6 (harness/hold.py) until the page has shown it between
    # 0 and 100 %: the progress is seen moving however fast the machine runs the steps.
    # Then it holds again after its last step (before the decode), until the page has shown the
    # preview the loop made after one of the steps between.
    hold, decoding = Hold(tmp_path, step=3), Hold(tmp_path, step="decode", name="decoding")
    # TI2V (it takes a first frame but needs none): the page's extend button shows, and its
    # runs are text-to-video ones until then
    ti2v = ["model=tiny_ti2v" if s == "model=tiny" else s for s in SETTINGS]
    server = Server(tmp_path / "storage", ti2v, env=hold.env() | decoding.env()).wait_ready()
    try:
        browser.get(server.url + "/")
        for name, value in (
            ("prompt", "a paper boat"),
            ("size", "64x64"),
            ("num_frames", "9"),
            ("num_inference_steps", "6"),
            ("seed", "8"),
        ):
            browser.find_element(By.ID, name).send_keys(value)
        browser.find_element(By.ID, "submit").click()
        store = Store(str(tmp_path / "storage" / "queue.sqlite3"))
        seen, previewed, deadline = [], None, time.monotonic() + 300
        while time.monotonic() < deadline:  # the page redraws its rows as it polls: read one row in one call
            row = browser.execute_script(
                "const r = document.querySelector('#queue tr'); return r && [r.dataset.id, "
                "r.querySelector('.status').textContent, r.querySelector('.progress').dataset.value]"
            )
            if row:
                video_id, status, progress = row
                seen.append((status, int(progress)))
                # released once the page's GET of the preview has reached the server (the store
                # holds the wish): the loop's next step then makes one. Released on the progress
                # alone, the tiny model's last steps could all vote before the browser's image
                # request arrived — no preview, and the decode held until the deadline (seen once
                # under load).
                if 0 < int(progress) < 100 and store.preview_wanted(video_id):
                    hold.release_all()
                if int(progress) == 99 and not previewed:  # every step done, held before the decode
                    previewed = browser.execute_script(
                        "const p = document.getElementById('preview'); return !p.hidden && p.complete && "
                        "p.naturalWidth > 0 && [p.naturalWidth, p.naturalHeight]"
                    )
                    if previewed:
                        assert previewed == [64, 64], previewed
                        decoding.release_all()
                if status in ("completed", "failed"):
                    break
            time.sleep(0.05)
        assert seen and seen[-1] == ("completed", 100), (seen[-5:], browser.find_element(By.ID, "message").text)
        assert any(0 < p < 100 for _, p in seen) and previewed == [64, 64], (seen, previewed)
        assert server.video(video_id)["prompt"] == "a paper boat"
        player = browser.find_element(By.ID, "player")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and browser.execute_script("return arguments[0].readyState", player) < 1:
            time.sleep(0.1)
        state = browser.execute_script(
            "return [arguments[0].readyState, arguments[0].videoWidth, arguments[0].duration,"
            " arguments[0].error && arguments[0].error.code, arguments[0].currentSrc]",
            player,
        )
        assert state[0] >= 1 and state[1] == 64 and state[2] > 0, state
        assert state[4].endswith(f"/v1/videos/{video_id}/content")
        # remix it from the page: the prompt now in the form, the row's button
        prompt = browser.find_element(By.ID, "prompt")
        prompt.clear()
        prompt.send_keys("a paper boat at dusk")
        # the page redraws its rows as it polls: find and click in one call
        remixed = click(browser, video_id, "remix", [video_id])
        made = server.wait_for(remixed, "completed")
        assert (made["prompt"], made["remixed_from_video_id"]) == ("a paper boat at dusk", video_id), made
        # extend it from the page: twice as long, continued from its last frame, the stitched mp4
        extended = click(browser, video_id, "extend", [video_id, remixed])
        made = server.wait_for(extended, "completed")
        # the page asks for seconds = 2 × 0.33 (the source's 9 frames at TI2V's 24 fps): 17 frames,
        # the nearest 4k+1, whose true duration the answer says
        assert server.video(video_id)["seconds"] == "0.33"
        assert (made["prompt"], made["seconds"]) == ("a paper boat at dusk", "0.67"), made
        stitched = server.client.get(f"/v1/videos/{extended}/content").content
        assert frame_count(stitched) == 17
    finally:
        hold.release_all()
        decoding.release_all()
        server.stop()


def click(browser, video_id: str, button: str, known: list) -> str:
    """Click `button` on the row of `video_id` (found and clicked in one call: the page redraws
    its rows as it polls); the id of the new job that then shows in the queue."""
    clicked = browser.execute_script(
        "const r = document.querySelector(`#queue tr[data-id='${arguments[0]}']`);"
        "const b = r && r.querySelector(`button.${arguments[1]}`); if (!b) return false; b.click(); return true",
        video_id,
        button,
    )
    assert clicked is True, f"no {button} button on the row of {video_id}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ids = browser.execute_script("return [...document.querySelectorAll('#queue tr')].map(r => r.dataset.id)")
        made = next((i for i in ids if i not in known), None)
        if made is not None:
            return made
        time.sleep(0.05)
    raise AssertionError(f"no new job showed after the {button} click: {browser.find_element('id', 'message').text}")


def frame_count(mp4: bytes) -> int:
    import imageio.v3 as iio

    return sum(1 for _ in iio.imiter(mp4, extension=".mp4"))


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_an_i2v_page_asks_for_the_first_frame_and_takes_a_last_one(tmp_path, browser):
    """On an I2V server (GET /v1/models' inputs: input_reference required, last_image optional)
    the page shows a last-frame field, will not submit without the first frame, and uploads
    both files: the job runs as the command line's image= and last_image= with those bytes."""
    import json

    from harness.images import write_png
    from selenium.webdriver.common.by import By

    first, last = write_png(tmp_path / "first.png", 64, 64), write_png(tmp_path / "last.png", 32, 32)
    hold = Hold(tmp_path, step=1)  # the job waits before its first step: what is checked is what it was given
    i2v = ["model=tiny_i2v" if s == "model=tiny" else s for s in SETTINGS]
    server = Server(tmp_path / "storage", i2v, env=hold.env()).wait_ready()
    try:
        browser.get(server.url + "/")
        deadline = time.monotonic() + 60  # the fields show once the page has read GET /v1/models
        while time.monotonic() < deadline and not browser.find_element(By.ID, "last_image").is_displayed():
            time.sleep(0.05)
        assert browser.find_element(By.ID, "last_image").is_displayed()
        assert browser.execute_script("return $('input_reference').required && !$('last_image').required")
        for other in ("audio_reference", "pose_video", "face_video", "mode", "background_video", "mask_video"):
            assert not browser.find_element(By.ID, other).is_displayed(), other  # S2V's, Animate's
        browser.find_element(By.ID, "prompt").send_keys("a lighthouse")
        # no first frame: the browser refuses the form itself, nothing is sent
        assert not browser.execute_script("return $('create').checkValidity()")
        browser.find_element(By.ID, "input_reference").send_keys(str(first))
        browser.find_element(By.ID, "last_image").send_keys(str(last))
        browser.find_element(By.ID, "submit").click()
        store, deadline = Store(str(tmp_path / "storage" / "queue.sqlite3")), time.monotonic() + 60
        while time.monotonic() < deadline and not store.page(1)[0]:
            time.sleep(0.05)
        (row,), _ = store.page(1)
        settings = json.loads(store.get(row["id"])["settings"])
        for setting, path in (("image", first), ("last_image", last)):
            assert open(settings[setting], "rb").read() == open(path, "rb").read(), setting
    finally:
        hold.release_all()
        server.stop()


def test_a_text_to_video_page_shows_no_last_frame_field():
    """The page is one file for every model: the last-frame field (and S2V's speech, Animate's
    videos and mode) start hidden and are shown only for a model whose GET /v1/models inputs name
    them (the I2V test above)."""
    from parallel_wan.serve.fields import FIELD_OF
    from parallel_wan.serve.page import PAGE

    assert '<input id="last_image" name="last_image" type="file" accept="image/*" hidden>' in PAGE
    assert '<input id="audio_reference" name="audio_reference" type="file" accept="audio/*" hidden>' in PAGE
    for name in ("pose_video", "face_video", "background_video", "mask_video"):
        assert f'<input id="{name}" name="{name}" type="file" accept="video/*" hidden>' in PAGE
    assert '<select id="mode" name="mode" hidden>' in PAGE
    # every input any variant takes has its field on the page (models/variants.py)
    from parallel_wan.models.variants import VARIANTS

    for variant in VARIANTS:
        for given in variant.inputs:
            assert f'id="{FIELD_OF[given.name]}"' in PAGE, given.name
    assert "m.data[0].inputs" in PAGE
