"""The chat page (GET /, fastgguf/server/page.py and static/) against a real `fastgguf serve` with an API key, in a
real headless Chromium driven by Selenium: it loads without console errors, asks for the key until it has one, lists
the model, streams a reply, Stop aborts a long generation and keeps its text, a reply holding <script> and
<img onerror> is shown as text (the reply forced by a GBNF grammar the page passes through its "extra request
fields" setting, so the text goes through the server, the stream and the renderer as any reply's does), and
conversations survive a reload. Skipped where selenium, chromium or chromedriver is missing (.ci/run installs them).

CHAT_PAGE_SCREENSHOT=path saves a screenshot of the page (test_screenshot: docs/chat-page.png is one)."""
import json
import os
import re
import shutil

import pytest

from conftest import API_KEY, Server, http

from fastgguf.server import page

BROWSER = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
DRIVER = shutil.which("chromedriver")
WAIT = 60  # seconds: a reply of the default model takes about one


# -- the page's HTTP side (no browser) -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chat_server(default_model_path):
    s = Server(default_model_path, "--parallel", "2")
    yield s
    s.stop()


def test_page_and_files_need_no_key(chat_server):
    """The page and its files load without the key, with the page's CSP; the API still needs the key."""
    status, text, headers = http(chat_server, "GET", "/", key=None)
    assert status == 200 and headers["Content-Type"].startswith("text/html") and "/static/chat.js" in text
    assert headers["Content-Security-Policy"] == page.CSP and "'unsafe-inline'" not in page.CSP
    for name, kind in (("chat.js", "text/javascript"), ("markdown.js", "text/javascript"), ("chat.css", "text/css")):
        status, _, headers = http(chat_server, "GET", "/static/" + name, key=None)
        assert status == 200 and headers["Content-Type"].startswith(kind), name
    assert http(chat_server, "GET", "/v1/models", key=None)[0] == 401
    status, text, headers = http(chat_server, "HEAD", "/", key=None)
    assert status == 200 and text == "" and headers["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("path", ["/static/nothing.js", "/static/../v1/models", "/static/%2e%2e%2fpage.py",
                                  "/static/.hidden.js", "/static/page.py"])
def test_only_the_page_files(chat_server, path):
    """/static/ answers the page's files only: no other file, no path out of static/, no route behind the key."""
    status, body, _ = http(chat_server, "GET", path, key=None)
    assert status == 404 and body["error"]["code"] == "not_found", (path, body)


def test_page_keeps_the_host_check(chat_server):
    """A DNS-rebinding page (a Host not allowed) gets the 400, not the page."""
    status, body, _ = http(chat_server, "GET", "/", key=None, headers={"Host": "evil.example"})
    assert status == 400 and body["error"]["code"] == "invalid_host"


def test_page_files_ship():
    """The files the page needs are in the package (in CI: the installed wheel, built from the sdist)."""
    for name in ("index.html", "chat.js", "markdown.js", "chat.css"):
        assert os.path.isfile(os.path.join(page.STATIC, name)), name


# -- the browser ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="selenium is not installed: pip install '.[browser-test]'")
    if BROWSER is None or DRIVER is None:
        pytest.skip("chromium or chromedriver is not installed (Debian: apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = BROWSER
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,760"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=DRIVER))
    yield driver
    driver.quit()


def console_errors(driver):
    """The browser's errors since the last call, but the 401 of /favicon.ico that visiting /health (JSON: no icon
    link) makes Chrome log, sometimes only after open_page has dropped that page's messages."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "/favicon.ico" not in e["message"]]


def wait_for(driver, condition, timeout=WAIT):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d))


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def open_page(driver, server, key=API_KEY, **settings):
    """The page with a fresh localStorage holding `settings` (settings fields by id) and the API key (None: none):
    a first page load that has the key, as a returning user's does."""
    driver.get(server.base + "/health")  # the origin, to set its storage before the page's script runs
    js(driver, "localStorage.clear(); localStorage.setItem('fastgguf.settings', arguments[0]);",
       json.dumps({"api-key": key or "", **settings}))
    driver.get_log("browser")  # (drops the messages of /health: its favicon.ico's 401)
    driver.get(server.base + "/")
    if key:
        wait_for(driver, lambda d: js(d, "return document.getElementById('model').options.length") > 0)


def set_field(driver, field, value):
    """Type into a settings field as a user does (the change event saves it)."""
    js(driver, "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
               "e.dispatchEvent(new Event('change', {bubbles: true}));", field, value)


def send(driver, text):
    from selenium.webdriver.common.keys import Keys
    box = driver.find_element("id", "prompt")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def last_reply(driver):
    """(text, meta, finished) of the last assistant message."""
    return js(driver, "const m = [...document.querySelectorAll('.message.assistant')].pop();"
                      "return m ? [m.querySelector('.content').textContent, m.querySelector('.meta').textContent,"
                      " m.classList.contains('done')] : null;")


def test_page_asks_for_the_key(browser, chat_server):
    """Without a key the page loads (its only error: the 401 of /v1/models) and says a key is needed; entering it
    lists the model."""
    open_page(browser, chat_server, key=None)
    wait_for(browser, lambda d: "API key" in d.find_element("id", "status").text)
    errors = console_errors(browser)
    assert all("/v1/models" in e["message"] and "401" in e["message"] for e in errors), errors
    set_field(browser, "api-key", API_KEY)
    wait_for(browser, lambda d: js(d, "return document.getElementById('model').options.length") == 1)
    assert browser.find_element("id", "status").text == ""


def test_streams_a_reply(browser, chat_server):
    """A message gets a reply that streams in (its text changes many times, with Stop shown, before it is done), then
    shows its token count and speed; Send is back, Stop hidden; no console error."""
    open_page(browser, chat_server, max_tokens="48", temperature="0")
    js(browser, """window.updates = 0; window.stopShown = false;
        new MutationObserver((records) => {
            const n = records.filter((r) => r.target.matches('.message.assistant .content')).length;
            window.updates += n;
            window.stopShown ||= n > 0 && !document.getElementById('stop').hidden;
        }).observe(document.getElementById('messages'), {childList: true, subtree: true});""")
    send(browser, "Say hello in one short sentence.")
    text, meta, _ = wait_for(browser, lambda d: (r := last_reply(d)) and r[2] and r)
    assert text.strip() and re.fullmatch(r"\d+ tokens, [\d.]+ tokens/s", meta), (text, meta)
    assert js(browser, "return window.updates") >= 3 and js(browser, "return window.stopShown")
    assert browser.find_element("id", "send").is_displayed() and not browser.find_element("id", "stop").is_displayed()
    assert console_errors(browser) == []


def test_stop_keeps_the_partial_reply(browser, chat_server):
    """A long generation (a grammar asking for 20,000 letters, max_tokens 3000) stopped after its first words:
    the reply ends there, marked stopped, and stays."""
    open_page(browser, chat_server, max_tokens="3000", extra=json.dumps({"grammar": "root ::= [a-z ]{20000}"}))
    send(browser, "Write a very long story.")
    wait_for(browser, lambda d: len((last_reply(d) or [""])[0]) > 20)
    browser.find_element("id", "stop").click()
    text, meta, _ = wait_for(browser, lambda d: (r := last_reply(d)) and r[2] and r)
    assert "stopped" in meta and 20 < len(text) < 20000, (len(text), meta)
    assert last_reply(browser)[0] == text and console_errors(browser) == []
    stored = js(browser, "return JSON.parse(localStorage.getItem('fastgguf.conversations'))[0].messages[1].content")
    assert stored == text


SCRIPT_REPLY = "Hi <script>window.pwned=1</script><img src=x onerror=window.pwned=2> **bold** `<b>x</b>`"


def test_script_in_a_reply_is_text(browser, chat_server):
    """A reply forced (by a grammar) to hold <script> and <img onerror>: shown as those characters, no such
    element in the page, nothing run (and no CSP report: nothing tried to run)."""
    open_page(browser, chat_server, extra=json.dumps({"grammar": f"root ::= {json.dumps(SCRIPT_REPLY)}"}))
    send(browser, "hi")
    text, _, _ = wait_for(browser, lambda d: (r := last_reply(d)) and r[2] and r)
    assert text == SCRIPT_REPLY.replace("**", "").replace("`", "")
    assert js(browser, "return document.querySelectorAll('#messages script, #messages img, #messages b').length") == 0
    assert js(browser, "return document.querySelector('.message.assistant strong').textContent") == "bold"
    assert js(browser, "return document.querySelector('.message.assistant code').textContent") == "<b>x</b>"
    assert js(browser, "return window.pwned === undefined") and console_errors(browser) == []


MARKDOWN = """# Title
Some *em* and _em_ and **strong**, `code <i>`, a snake_case_name.
second line

- one
- **two**

3. three
4. four

```python
print("<script>")
```
<img src=x onerror=alert(1)>"""


def test_markdown_renderer(browser, chat_server):
    """markdown.render (the page's renderer, in the browser) on a crafted text: each block and inline form, and only
    those elements; HTML in the text stays text."""
    open_page(browser, chat_server)
    tree = js(browser, """
        const walk = (n) => n.nodeType === 3 ? n.textContent
                                             : [n.nodeName.toLowerCase(), ...[...n.childNodes].map(walk)];
        return [...markdown.render(arguments[0]).childNodes].map(walk);""", MARKDOWN)
    assert tree == [
        ["h1", "Title"],
        ["p", "Some ", ["em", "em"], " and ", ["em", "em"], " and ", ["strong", "strong"], ", ",
         ["code", "code <i>"], ", a snake_case_name.", ["br"], "second line"],
        ["ul", ["li", "one"], ["li", ["strong", "two"]]],
        ["ol", ["li", "three"], ["li", "four"]],
        ["pre", ["code", 'print("<script>")']],
        ["p", "<img src=x onerror=alert(1)>"],
    ]


def test_conversations_survive_a_reload(browser, chat_server):
    """Conversations are kept in localStorage: a reload shows the same list and messages; new and delete persist."""
    open_page(browser, chat_server, max_tokens="8")
    for text in ("first chat", "second chat"):
        browser.find_element("id", "new-chat").click()
        send(browser, text)
        wait_for(browser, lambda d: (r := last_reply(d)) and r[2])
    titles = "return [...document.querySelectorAll('#conversations .open')].map(b => b.textContent)"
    assert js(browser, titles) == ["second chat", "first chat"]
    browser.refresh()
    wait_for(browser, lambda d: js(d, titles) == ["second chat", "first chat"])
    assert js(browser, "return document.querySelector('.message.user').textContent") == "second chat"
    browser.find_elements("css selector", "#conversations .delete")[0].click()
    browser.refresh()
    wait_for(browser, lambda d: js(d, titles) == ["first chat"])
    assert js(browser, "return document.querySelector('.message.user').textContent") == "first chat"
    assert console_errors(browser) == []


@pytest.mark.skipif(not os.environ.get("CHAT_PAGE_SCREENSHOT"), reason="CHAT_PAGE_SCREENSHOT=path not set")
def test_screenshot(browser, chat_server):
    """CHAT_PAGE_SCREENSHOT=docs/chat-page.png: the README's screenshot (settings open, a reply with code)."""
    open_page(browser, chat_server, max_tokens="200", temperature="0", system="You are a helpful assistant.")
    browser.find_element("css selector", "#settings summary").click()
    send(browser, "Write a Python function that adds two numbers.")
    wait_for(browser, lambda d: (r := last_reply(d)) and r[2])
    browser.save_screenshot(os.environ["CHAT_PAGE_SCREENSHOT"])
