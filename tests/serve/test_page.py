"""GET / in a real browser (Debian's chromium, headless, driven by selenium through Debian's
chromedriver): a request submitted from the page's form, its progress moving in the queue, and
the <video> element loading the finished mp4."""

import os
import shutil
import time

import pytest
from harness.hold import Hold
from harness.serve import SETTINGS, Server

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
    server = Server(tmp_path / "storage", SETTINGS, env=hold.env() | decoding.env()).wait_ready()
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
        seen, previewed, deadline = [], None, time.monotonic() + 300
        while time.monotonic() < deadline:  # the page redraws its rows as it polls: read one row in one call
            row = browser.execute_script(
                "const r = document.querySelector('#queue tr'); return r && [r.dataset.id, "
                "r.querySelector('.status').textContent, r.querySelector('.progress').dataset.value]"
            )
            if row:
                video_id, status, progress = row
                seen.append((status, int(progress)))
                if 0 < int(progress) < 100:
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
        clicked = browser.execute_script(
            "const r = document.querySelector(`#queue tr[data-id='${arguments[0]}']`);"
            "if (!r) return null; r.querySelector('button.remix').click();"
            "return r.querySelector('button.extend') === null",
            video_id,
        )
        assert clicked is True, clicked  # clicked, and no extend button: a text-to-video server extends nothing
        deadline, remixed = time.monotonic() + 300, None
        while time.monotonic() < deadline and remixed is None:
            ids = browser.execute_script("return [...document.querySelectorAll('#queue tr')].map(r => r.dataset.id)")
            remixed = next((i for i in ids if i != video_id), None)
            time.sleep(0.05)
        made = server.wait_for(remixed, "completed")
        assert (made["prompt"], made["remixed_from_video_id"]) == ("a paper boat at dusk", video_id), made
    finally:
        hold.release_all()
        decoding.release_all()
        server.stop()
