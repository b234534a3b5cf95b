// A small Markdown renderer for model answers. It builds DOM nodes with
// createElement and text nodes only: model text is never parsed as HTML, so
// "<script>" in an answer shows as those characters and nothing runs.
// Covers what chat models write: paragraphs (single newlines kept as line
// breaks), ATX headings, emphasis, strikethrough, inline code, fenced code
// blocks (an unclosed fence, as while streaming, runs to the end), nested
// lists, block quotes, tables, rules and links limited to http(s) and mailto.
"use strict";

const cellmMarkdown = (() => {
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
  // [text](url "title"), the url optionally in <>.
  const LINK = /^\[((?:[^\[\]\\]|\\.)*)\]\(\s*<?([^\s()<>]+)>?(?:\s+"[^"]*")?\s*\)/;
  const ESCAPABLE = "\\`*_{}[]()#+-.!~<>|\"'";

  function el(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  // Only absolute http(s) and mailto URLs become links; anything else
  // (javascript:, data:, relative paths) stays text.
  function safeUrl(raw) {
    try {
      const url = new URL(raw.trim());
      return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
    } catch (e) {
      return null;
    }
  }

  function link(href, parts) {
    const a = el("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer nofollow";
    a.append(...parts);
    return a;
  }

  const isSpace = (c) => c === undefined || /\s/.test(c);
  const isWordChar = (c) => c !== undefined && /[\p{L}\p{N}]/u.test(c);

  // The index of the run of exactly `size` `c`s that closes an opener ending
  // at `from`, or -1. A closer follows a non-space and, for "_", does not
  // sit inside a word.
  function findCloser(src, c, size, from) {
    for (let at = src.indexOf(c, from); at >= 0; at = src.indexOf(c, at + 1)) {
      let end = at;
      while (src[end] === c) end += 1;
      if (end - at === size && at > from && !isSpace(src[at - 1]) &&
          (c !== "_" || !isWordChar(src[end]))) {
        return at;
      }
      at = end - 1;
    }
    return -1;
  }

  // Appends the inline content of `src` to `parent`.
  function inline(src, parent) {
    let text = "";
    const flush = () => {
      if (text) parent.append(document.createTextNode(text));
      text = "";
    };
    let i = 0;
    while (i < src.length) {
      const c = src[i];
      if (c === "\\" && ESCAPABLE.includes(src[i + 1] || "\n")) {
        text += src[i + 1];
        i += 2;
        continue;
      }
      if (c === "\n") {
        flush();
        parent.append(el("br"));
        i += 1;
        continue;
      }
      if (c === "`") {
        let n = 1;
        while (src[i + n] === "`") n += 1;
        const ticks = "`".repeat(n);
        let close = src.indexOf(ticks, i + n);
        while (close >= 0 && src[close + n] === "`") close = src.indexOf(ticks, close + n + 1);
        if (close < 0) {
          text += ticks;
          i += n;
          continue;
        }
        flush();
        const code = el("code");
        code.textContent = src.slice(i + n, close).replace(/\n/g, " ");
        parent.append(code);
        i = close + n;
        continue;
      }
      if (c === "*" || c === "_" || c === "~") {
        let n = 1;
        while (src[i + n] === c) n += 1;
        const canOpen = !isSpace(src[i + n]) && (c !== "_" || !isWordChar(src[i - 1]));
        const sizes = (c === "~" ? [2] : [3, 2, 1]).filter((size) => size <= n);
        let done = false;
        for (const size of canOpen ? sizes : []) {
          const close = findCloser(src, c, size, i + n);
          if (close < 0) continue;
          text += c.repeat(n - size);  // extra opener characters stay text
          flush();
          let node;
          if (c === "~") node = el("del");
          else if (size === 3) node = el("strong");
          else node = el(size === 2 ? "strong" : "em");
          if (size === 3) {
            const em = el("em");
            inline(src.slice(i + n, close), em);
            node.append(em);
          } else {
            inline(src.slice(i + n, close), node);
          }
          parent.append(node);
          i = close + size;
          done = true;
          break;
        }
        if (!done) {
          text += c.repeat(n);
          i += n;
        }
        continue;
      }
      if (c === "[") {
        const m = LINK.exec(src.slice(i));
        if (m) {
          flush();
          const href = safeUrl(m[2]);
          const holder = el("span");
          inline(m[1], holder);
          parent.append(href ? link(href, [...holder.childNodes]) : holder);
          i += m[0].length;
          continue;
        }
      }
      if (c === "<") {
        const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/.exec(src.slice(i));
        const href = m && safeUrl(m[1]);
        if (href) {
          flush();
          parent.append(link(href, [m[1]]));
          i += m[0].length;
          continue;
        }
      }
      if ((c === "h" || c === "H") && !isWordChar(src[i - 1])) {
        const m = /^https?:\/\/[^\s<>"]+/i.exec(src.slice(i));
        if (m) {
          // Sentence punctuation after a bare URL is not part of it.
          const url = m[0].replace(/[.,;:!?'")\]]+$/, "");
          const href = safeUrl(url);
          if (href) {
            flush();
            parent.append(link(href, [url]));
            i += url.length;
            continue;
          }
        }
      }
      text += c;
      i += 1;
    }
    flush();
  }

  function codeBlock(lang, body) {
    const wrap = el("div", "code-block");
    const head = el("div", "code-head");
    const label = el("span", "code-lang");
    label.textContent = lang || "code";
    const copy = el("button", "copy");
    copy.type = "button";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", "Copy code" + (lang ? " (" + lang + ")" : ""));
    head.append(label, copy);
    const pre = el("pre");
    const code = el("code");
    if (lang) code.dataset.lang = lang;
    code.textContent = body;
    pre.append(code);
    wrap.append(head, pre);
    return wrap;
  }

  // The cells of a table row: split on "|" outside code spans, "\|" kept.
  function cells(line) {
    let row = line.trim();
    if (row.startsWith("|")) row = row.slice(1);
    if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
    const out = [];
    let cell = "";
    let inCode = false;
    for (let i = 0; i < row.length; i += 1) {
      const c = row[i];
      if (c === "\\" && row[i + 1] === "|") {
        cell += "|";
        i += 1;
      } else if (c === "`") {
        inCode = !inCode;
        cell += c;
      } else if (c === "|" && !inCode) {
        out.push(cell.trim());
        cell = "";
      } else {
        cell += c;
      }
    }
    out.push(cell.trim());
    return out;
  }

  const isTableStart = (lines, i) =>
    i + 1 < lines.length && lines[i].includes("|") && TABLE_RULE.test(lines[i + 1]) &&
    (lines[i + 1].includes("|") || cells(lines[i]).length > 1) &&
    cells(lines[i]).length === cells(lines[i + 1]).length;

  // A table starting at lines[start]; returns the index after it.
  function table(lines, start, parent) {
    const head = cells(lines[start]);
    const align = cells(lines[start + 1]).map((c) =>
      c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : "");
    const wrap = el("div", "table-wrap");
    const node = el("table");
    const row = (texts, tag) => {
      const tr = el("tr");
      head.forEach((_, k) => {
        const cell = el(tag);
        if (align[k]) cell.style.textAlign = align[k];
        inline(texts[k] || "", cell);
        tr.append(cell);
      });
      return tr;
    };
    const thead = el("thead");
    thead.append(row(head, "th"));
    const tbody = el("tbody");
    let i = start + 2;
    while (i < lines.length && !isBlank(lines[i]) && lines[i].includes("|")) {
      tbody.append(row(cells(lines[i]), "td"));
      i += 1;
    }
    node.append(thead, tbody);
    wrap.append(node);
    parent.append(wrap);
    return i;
  }

  const indentOf = (line) => line.match(/^\s*/)[0].replace(/\t/g, "    ").length;
  const isBlank = (line) => /^\s*$/.test(line);

  // Block structure of `lines`, appended to `parent`.
  function blocks(lines, parent) {
    let i = 0;
    let para = [];
    const endPara = () => {
      if (para.length === 0) return;
      const p = el("p");
      inline(para.join("\n").trim(), p);
      parent.append(p);
      para = [];
    };
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (isBlank(line)) {
        endPara();
        i += 1;
      } else if ((m = FENCE.exec(line))) {
        endPara();
        const fence = m[1];
        const indent = indentOf(line);
        const body = [];
        i += 1;
        while (i < lines.length) {
          const close = lines[i].trim();
          if (close.startsWith(fence[0].repeat(fence.length)) && /^(`+|~+)$/.test(close)) break;
          body.push(lines[i].slice(Math.min(indent, indentOf(lines[i]))));
          i += 1;
        }
        i += 1;  // the closing fence, or past the end while it streams
        parent.append(codeBlock(m[2], body.join("\n")));
      } else if ((m = HEADING.exec(line))) {
        endPara();
        const h = el("h" + m[1].length);
        inline(m[2] || "", h);
        parent.append(h);
        i += 1;
      } else if (RULE.test(line)) {
        endPara();
        parent.append(el("hr"));
        i += 1;
      } else if (isTableStart(lines, i)) {
        endPara();
        i = table(lines, i, parent);
      } else if (QUOTE.test(line)) {
        endPara();
        const inner = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
          inner.push(m[1]);
          i += 1;
        }
        const q = el("blockquote");
        blocks(inner, q);
        parent.append(q);
      } else if ((m = ITEM.exec(line)) && (para.length === 0 || m[3].trim() !== "")) {
        endPara();
        i = list(lines, i, parent);
      } else {
        para.push(line);
        i += 1;
      }
    }
    endPara();
  }

  // A list starting at lines[start]; returns the index after it. Lines
  // indented past an item's marker belong to that item (nested lists,
  // continued text); a blank line ends the list unless an item follows.
  function list(lines, start, parent) {
    const first = ITEM.exec(lines[start]);
    const base = indentOf(lines[start]);
    const ordered = /\d/.test(first[2]);
    const node = el(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
    let i = start;
    while (i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || indentOf(lines[i]) !== base || /\d/.test(m[2]) !== ordered) break;
      const contentIndent = base + m[2].length + 1;
      const body = [m[3]];
      i += 1;
      while (i < lines.length) {
        const line = lines[i];
        if (isBlank(line)) {
          // A blank line continues the item only if indented content follows.
          const next = lines.slice(i + 1).find((l) => !isBlank(l));
          if (next === undefined || indentOf(next) < contentIndent) break;
          body.push("");
          i += 1;
          continue;
        }
        const indent = indentOf(line);
        if (indent <= base && ITEM.test(line)) break;
        if (indent < contentIndent && (ITEM.test(line) || FENCE.test(line) ||
                                       HEADING.test(line) || QUOTE.test(line))) {
          if (indent <= base) break;
        }
        body.push(indent >= contentIndent ? line.slice(contentIndent) : line.trimStart());
        i += 1;
      }
      const li = el("li");
      const sub = document.createDocumentFragment();
      blocks(body, sub);
      // A one-paragraph item shows its text without the paragraph margin.
      if (sub.childNodes.length >= 1 && sub.firstChild.nodeName === "P") {
        const p = sub.firstChild;
        sub.removeChild(p);
        li.append(...p.childNodes);
      }
      li.append(sub);
      node.append(li);
      while (i < lines.length && isBlank(lines[i])) {
        const next = lines.slice(i).find((l) => !isBlank(l));
        const nm = next !== undefined && ITEM.exec(next);
        if (!nm || indentOf(next) !== base || /\d/.test(nm[2]) !== ordered) break;
        i += 1;
      }
    }
    parent.append(node);
    return i;
  }

  // Renders `markdown` into a DocumentFragment.
  function render(markdown) {
    const fragment = document.createDocumentFragment();
    blocks(String(markdown).replace(/\r\n?/g, "\n").split("\n"), fragment);
    return fragment;
  }

  return { render };
})();
