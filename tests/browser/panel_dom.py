"""Reach into a Panel page's shadow DOM from Selenium (Bokeh 3 renders each widget in a
shadow root): find a widget by its css class, read its text, set and click it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

_BOOT = """
window.__dpDeep = function deep(root, sel) {
  const hit = root.querySelector(sel);
  if (hit) return hit;
  for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) { const got = deep(el.shadowRoot, sel); if (got) return got; }
  }
  return null;
};
window.__dpFind = (root, cls) => window.__dpDeep(root, '.' + cls);
window.__dpText = function text(node) {
  let out = '';
  const kids = node.shadowRoot ? [node.shadowRoot, ...node.childNodes] : node.childNodes;
  for (const child of kids) {
    if (child.nodeType === 3) out += child.textContent;
    else if (child.nodeType === 1 || child.nodeType === 11) {
      if (child.tagName === 'STYLE' || child.tagName === 'SCRIPT') continue;
      if (child.tagName === 'OPTION') { out += ' ' + child.textContent; continue; }
      out += ' ' + text(child);
    }
  }
  return out;
};
"""


def host(driver: Any, cls: str) -> Any:
    """The shadow host of the widget with css class ``cls`` (or None)."""
    return driver.execute_script(_BOOT + "return window.__dpFind(document, arguments[0]);", cls)


def inner(driver: Any, cls: str, selector: str) -> Any:
    """An element inside the widget's shadow tree (or None)."""
    return driver.execute_script(
        _BOOT + "const h = window.__dpFind(document, arguments[0]); if (!h) return null;"
        "return window.__dpDeep(h.shadowRoot || h, arguments[1]);",
        cls,
        selector,
    )


def text(driver: Any, cls: str) -> str:
    """The visible text of the widget with css class ``cls`` ('' if absent)."""
    got = driver.execute_script(
        _BOOT + "const h = window.__dpFind(document, arguments[0]);"
        "return h ? window.__dpText(h) : '';",
        cls,
    )
    return " ".join(str(got).split())


def all_inner(driver: Any, cls: str, selector: str) -> list[Any]:
    """Every element matching ``selector`` anywhere inside the widget's shadow trees (a
    Bokeh plot nests its canvas and its tooltip a few shadow roots down), in order.
    """
    found = driver.execute_script(
        _BOOT + "const h = window.__dpFind(document, arguments[0]); if (!h) return [];"
        "const out = [], selector = arguments[1];"
        "(function walk(root) {"
        "  for (const el of root.querySelectorAll(selector)) out.push(el);"
        "  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) walk(el.shadowRoot);"
        "})(h.shadowRoot || h);"
        "return out;",
        cls,
        selector,
    )
    return list(found or [])


def deep_text(driver: Any, selector: str) -> str:
    """The text of every element matching ``selector`` anywhere in the page, shadow trees
    included (a Bokeh tooltip is drawn in the plot's own shadow root), joined."""
    got = driver.execute_script(
        "const out = [], selector = arguments[0];"
        "(function walk(root) {"
        "  for (const el of root.querySelectorAll(selector)) out.push(el.textContent);"
        "  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) walk(el.shadowRoot);"
        "})(document);"
        "return out.join(' ');",
        selector,
    )
    return " ".join(str(got).split())


def set_value(driver: Any, cls: str, value: Any) -> None:
    """Type ``value`` into the widget's input and commit it (a change event)."""
    element = inner(driver, cls, "input, select")
    assert element is not None, cls
    driver.execute_script(
        "arguments[0].value = arguments[1];"
        "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));"
        "arguments[0].dispatchEvent(new Event('change', {bubbles: true}));",
        element,
        str(value),
    )


def click(driver: Any, cls: str, selector: str = "button") -> None:
    """Click the widget's button (or ``selector`` inside it)."""
    element = inner(driver, cls, selector)
    assert element is not None, cls
    driver.execute_script("arguments[0].click();", element)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it is truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def release_and_wait(driver: Any, what: str, timeout: float = 300) -> None:
    """Press the app's Release and wait until it says it released or shows an error."""
    click(driver, "dp-release")
    wait_for(
        lambda: "Released in" in text(driver, "dp-status") or text(driver, "dp-error"),
        timeout,
        what,
    )
