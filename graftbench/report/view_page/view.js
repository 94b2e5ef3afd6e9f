// graftbench view: renders the runs embedded in this page (graftbench/report/view.py writes it).
// Every string from a run, a problem file or a model is data: it reaches the page only as textContent of elements
// made here, never as markup, an attribute that runs code, or a link.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("graftbench-data").textContent);
  var RUNS = DATA.runs, PROBLEMS = DATA.problems, EXAMPLES = DATA.examples || {};
  var state = {sort: {column: "order", direction: 1}, verdict: "", family: "", disagree: false, search: "",
               page: 0, pageSize: 50, opened: null, diffA: 0, diffB: RUNS.length > 1 ? 1 : 0, sample: 0};

  function el(tag, options, children) {
    var node = document.createElement(tag);
    options = options || {};
    if (options.cls) { node.className = options.cls; }
    if (options.text !== undefined && options.text !== null) { node.textContent = String(options.text); }
    if (options.title) { node.title = String(options.title); }
    if (options.id) { node.id = options.id; }
    if (options.data) { Object.keys(options.data).forEach(function (k) { node.dataset[k] = String(options.data[k]); }); }
    (children || []).forEach(function (child) { if (child) { node.appendChild(child); } });
    return node;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
  function fmt(value, digits) {
    if (value === null || value === undefined) { return "—"; }
    if (typeof value === "number") { return digits === undefined ? value.toLocaleString("en") : value.toFixed(digits); }
    return String(value);
  }
  function pct(value) { return value === null || value === undefined ? "—" : (100 * value).toFixed(1) + "%"; }
  function interval(pair) { return pair ? "[" + pct(pair[0]) + ", " + pct(pair[1]) + "]" : "—"; }
  function short(hash) { return typeof hash === "string" ? hash.slice(0, 12) : "—"; }

  // Per problem and run: the verdict of the problem (all samples correct, none, some), tokens and route.
  function runCell(problem, r) {
    var samples = problem.runs[r] || [];
    if (!samples.length) { return {verdict: "absent", correct: 0, n: 0, tokens: null, route: "—", certificate: "—"}; }
    var correct = samples.filter(function (s) { return s.correct === true; }).length;
    var answered = samples.filter(function (s) { return s.extracted !== null && s.extracted !== undefined; }).length;
    var verdict = correct === samples.length ? "correct" : correct > 0 ? "mixed" : answered ? "wrong" : "no answer";
    var tokens = samples.reduce(function (t, s) { return t + (s.decode_tokens || 0); }, 0) / samples.length;
    var first = samples[0];
    var route = first.route ? first.route + (first.artifact_id ? " " + short(first.artifact_id) : "") +
      (first.similarity !== null && first.similarity !== undefined ? " (" + fmt(first.similarity, 3) + ")" : "") :
      (first.mode || "—");
    var certificate = first.certified === true ? "certified" : first.certified === false ? "MISMATCH" : "—";
    return {verdict: verdict, correct: correct, n: samples.length, tokens: tokens, route: route, certificate: certificate};
  }
  var COLLATOR = new Intl.Collator("en", {numeric: true});  // 2024-I-2 before 2024-I-10
  PROBLEMS.forEach(function (p, i) {
    p.order = i;
    p.cells = RUNS.map(function (_, r) { return runCell(p, r); });
    var present = p.cells.filter(function (c) { return c.n > 0; });
    p.disagree = present.length > 1 && present.some(function (c) { return c.correct / c.n !== present[0].correct / present[0].n; });
  });

  function filtered() {
    var rows = PROBLEMS.filter(function (p) {
      if (state.family && p.family !== state.family) { return false; }
      if (state.disagree && !p.disagree) { return false; }
      if (state.search && p.id.toLowerCase().indexOf(state.search.toLowerCase()) < 0) { return false; }
      if (state.verdict) {
        var parts = state.verdict.split(":"), cell = p.cells[Number(parts[0])];
        if (!cell || cell.verdict !== parts[1]) { return false; }
      }
      return true;
    });
    var column = state.sort.column, direction = state.sort.direction;
    function key(p) {
      if (column === "order") { return p.order; }
      if (column === "id") { return p.id; }
      if (column === "family") { return p.family; }
      var parts = column.split(":"), cell = p.cells[Number(parts[1])];
      if (parts[0] === "verdict") { return cell.n ? cell.correct / cell.n : -1; }
      if (parts[0] === "tokens") { return cell.tokens === null ? -1 : cell.tokens; }
      return parts[0] === "route" ? cell.route : cell.certificate;
    }
    return rows.slice().sort(function (a, b) {
      var ka = key(a), kb = key(b);
      var c = typeof ka === "string" ? COLLATOR.compare(ka, kb) : ka < kb ? -1 : ka > kb ? 1 : 0;
      return c ? c * direction : a.order - b.order;
    });
  }

  function header() {
    var box = el("section", {cls: "runs", id: "runs"});
    RUNS.forEach(function (run, r) {
      var card = el("div", {cls: "run status-" + run.status, data: {run: r}});
      card.appendChild(el("h2", {text: "Run " + (r + 1) + ": " + run.label}));
      var status = run.status === "verified" ? "verify-manifest: ok" :
        run.status === "partial" ? "verify-manifest: no mismatch, but not everything was checked: " +
          run.notes.slice(0, 2).join("; ") :
        run.status === "failed" ? "verify-manifest FAILED (" + run.mismatch_count + " mismatch" +
          (run.mismatch_count === 1 ? "" : "es") + "): not a result" : "not sealed: no manifest, nothing verified";
      card.appendChild(el("p", {cls: "status", text: status}));
      var facts = [["model", run.model], ["engine", run.engine], ["device", run.device], ["dtype", run.dtype],
        ["pin", short(run.pin)], ["isa", run.isa + (run.cpu_capability ? " (" + run.cpu_capability + ")" : "")],
        ["command", run.command], ["mode", run.mode + (run.graft === true ? ", graft" : run.graft === false ? ", baseline" : "")],
        ["verifier", run.verifier_version], ["source", run.source]];
      if (run.reasoning && run.reasoning.length) { facts.push(["reasoning", run.reasoning.join(" … ")]); }
      var m = run.metrics;
      if (m) {
        facts.push(["accuracy", pct(m.accuracy) + " (" + m.correct + "/" + m.samples + ")" + " 95% " +
          interval(m.interval) + (m.interval_method ? " (" + m.interval_method + ")" : "")]);
        if (m.samples > m.problems) {
          var ks = Object.keys(m.pass_at_k || {}).sort(function (a, b) { return a - b; });
          facts.push(["avg@N", pct(m.accuracy) + " 95% " + interval(m.avg_interval) + " (bootstrap over problems)"]);
          facts.push(["pass@k", ks.map(function (k) { return "@" + k + " " + pct(m.pass_at_k[k]); }).join(", ")]);
          facts.push(["maj@N", pct(m.maj_at_n)]);
        }
        facts.push(["decode tokens", fmt(m.decode_tokens)]);
        if (m.thinking_tokens !== null && m.thinking_tokens !== undefined) { facts.push(["thinking tokens", fmt(m.thinking_tokens)]); }
        facts.push(["prefill tokens", fmt(m.prefill_tokens) + (m.prefill_tokens_saved ? " (" + fmt(m.prefill_tokens_saved) + " restored)" : "")]);
        facts.push(["energy", fmt(m.energy_j, 1) + " J" + (run.energy_method ? " (" + run.energy_method + ")" : "")]);
        facts.push(["time", fmt(m.wall_s, 1) + " s"]);
      }
      var dl = el("dl");
      facts.forEach(function (f) { dl.appendChild(el("dt", {text: f[0]})); dl.appendChild(el("dd", {text: fmt(f[1])})); });
      card.appendChild(dl);
      if (run.mismatches.length) {
        var list = el("ul", {cls: "mismatches"});
        run.mismatches.forEach(function (line) { list.appendChild(el("li", {text: line})); });
        card.appendChild(list);
      }
      if (run.notes.length) {
        var notes = el("ul", {cls: "notes"});
        run.notes.forEach(function (line) { notes.appendChild(el("li", {text: line})); });
        card.appendChild(notes);
      }
      box.appendChild(card);
    });
    return box;
  }

  function option(value, text, selected) {
    var node = el("option", {text: text});
    node.value = value;
    node.selected = selected;
    return node;
  }
  function controls() {
    var bar = el("section", {cls: "controls", id: "controls"});
    var verdict = el("select", {id: "filter-verdict", title: "verdict"});
    verdict.appendChild(option("", "any verdict", state.verdict === ""));
    RUNS.forEach(function (run, r) {
      ["correct", "wrong", "no answer", "mixed"].forEach(function (v) {
        verdict.appendChild(option(r + ":" + v, "run " + (r + 1) + ": " + v, state.verdict === r + ":" + v));
      });
    });
    verdict.addEventListener("change", function () { state.verdict = verdict.value; state.page = 0; renderTable(); });
    var families = el("select", {id: "filter-family", title: "family"});
    families.appendChild(option("", "any family", state.family === ""));
    PROBLEMS.map(function (p) { return p.family; }).filter(function (f, i, all) { return all.indexOf(f) === i; }).sort()
      .forEach(function (f) { families.appendChild(option(f, f, state.family === f)); });
    families.addEventListener("change", function () { state.family = families.value; state.page = 0; renderTable(); });
    var disagree = el("input", {id: "filter-disagree"});
    disagree.type = "checkbox";
    disagree.checked = state.disagree;
    disagree.addEventListener("change", function () { state.disagree = disagree.checked; state.page = 0; renderTable(); });
    var search = el("input", {id: "filter-id", title: "problem id contains"});
    search.type = "search";
    search.placeholder = "problem id";
    search.addEventListener("input", function () { state.search = search.value; state.page = 0; renderTable(); });
    var size = el("select", {id: "page-size", title: "rows per page"});
    [25, 50, 100, 500].forEach(function (n) { size.appendChild(option(String(n), n + " per page", state.pageSize === n)); });
    size.addEventListener("change", function () { state.pageSize = Number(size.value); state.page = 0; renderTable(); });
    var csv = el("button", {id: "export-csv", text: "Export CSV"});
    csv.type = "button";
    csv.addEventListener("click", exportCsv);
    var label = el("label", {}, [disagree, document.createTextNode(" only where the runs disagree")]);
    [verdict, families, label, search, size, csv].forEach(function (n) { bar.appendChild(n); });
    return bar;
  }

  function columns() {
    var cols = [{key: "id", title: "problem"}, {key: "family", title: "family"}];
    RUNS.forEach(function (run, r) {
      var tag = RUNS.length > 1 ? " " + (r + 1) : "";
      cols.push({key: "verdict:" + r, title: "verdict" + tag}, {key: "tokens:" + r, title: "decode tokens" + tag},
        {key: "route:" + r, title: "route" + tag}, {key: "certificate:" + r, title: "certificate" + tag});
    });
    return cols;
  }
  function cellText(p, key) {
    if (key === "id") { return p.id; }
    if (key === "family") { return p.family; }
    var parts = key.split(":"), c = p.cells[Number(parts[1])];
    if (parts[0] === "verdict") { return c.n > 1 ? c.verdict + " " + c.correct + "/" + c.n : c.verdict; }
    if (parts[0] === "tokens") { return c.tokens === null ? "—" : (c.n > 1 ? c.tokens.toFixed(1) : String(c.tokens)); }
    return parts[0] === "route" ? c.route : c.certificate;
  }

  function renderTable() {
    var box = document.getElementById("table");
    clear(box);
    var rows = filtered(), cols = columns();
    var pages = Math.max(1, Math.ceil(rows.length / state.pageSize));
    state.page = Math.min(state.page, pages - 1);
    var table = el("table", {id: "problems"}), head = el("tr");
    cols.forEach(function (col) {
      var mark = state.sort.column === col.key ? (state.sort.direction > 0 ? " ▲" : " ▼") : "";
      var th = el("th", {text: col.title + mark, data: {column: col.key}});
      th.addEventListener("click", function () {
        state.sort = {column: col.key, direction: state.sort.column === col.key ? -state.sort.direction : 1};
        renderTable();
      });
      head.appendChild(th);
    });
    table.appendChild(el("thead", {}, [head]));
    var body = el("tbody");
    rows.slice(state.page * state.pageSize, (state.page + 1) * state.pageSize).forEach(function (p) {
      var tr = el("tr", {cls: (p.disagree ? "disagree" : "") + (state.opened === p.id ? " opened" : ""), data: {problem: p.id}});
      cols.forEach(function (col) {
        var td = el("td", {text: cellText(p, col.key)});
        if (col.key.indexOf("verdict:") === 0) { td.className = "verdict v-" + p.cells[Number(col.key.split(":")[1])].verdict.replace(" ", "-"); }
        tr.appendChild(td);
      });
      tr.addEventListener("click", function () { openProblem(p.id); });
      body.appendChild(tr);
    });
    table.appendChild(body);
    box.appendChild(el("p", {id: "count", text: rows.length + " of " + PROBLEMS.length + " problems" +
      (rows.length ? ", page " + (state.page + 1) + " of " + pages : "")}));
    box.appendChild(table);
    var pager = el("div", {cls: "pager"});
    var prev = el("button", {id: "page-prev", text: "‹ previous"}), next = el("button", {id: "page-next", text: "next ›"});
    prev.type = next.type = "button";
    prev.disabled = state.page === 0;
    next.disabled = state.page >= pages - 1;
    prev.addEventListener("click", function () { state.page -= 1; renderTable(); });
    next.addEventListener("click", function () { state.page += 1; renderTable(); });
    pager.appendChild(prev);
    pager.appendChild(next);
    box.appendChild(pager);
  }

  function csvField(value) {
    var text = String(value === null || value === undefined ? "" : value);
    if (/^[=+\-@\t\r]/.test(text)) { text = "'" + text; }  // a spreadsheet never reads a cell as a formula
    return /[",\n\r]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  }
  function csvText() {
    var cols = columns();
    var lines = [cols.map(function (c) { return csvField(c.title); }).join(",")];
    filtered().forEach(function (p) { lines.push(cols.map(function (c) { return csvField(cellText(p, c.key)); }).join(",")); });
    return lines.join("\r\n") + "\r\n";
  }
  function exportCsv() {
    var url = URL.createObjectURL(new Blob([csvText()], {type: "text/csv"}));
    var link = el("a");
    link.href = url;
    link.download = "graftbench-view.csv";
    document.body.appendChild(link);
    link.click();
    document.body.removeChild(link);
    setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
  }

  // The output of one sample, in parts: reasoning (shown apart), text, the extracted answer marked, text.
  function outputBlock(sample) {
    var box = el("div", {cls: "output"}), text = sample.output || "";
    var end = Math.min(sample.reasoning_end || 0, text.length);
    if (end > 0) {
      box.appendChild(el("details", {cls: "reasoning"}, [el("summary", {text: sample.reasoning_cut ?
        "reasoning (cut: the output stopped inside it, so it has no answer)" : "reasoning (not read by the verifier)"}),
        el("pre", {text: text.slice(0, end)})]));
    }
    var pre = el("pre", {cls: "answer-text"}), span = sample.answer_span;
    if (sample.cue && end === 0) { pre.appendChild(el("span", {cls: "cue", text: sample.cue, title: "the prompt's answer cue, read before the output"})); }
    if (span && span[0] >= end) {
      pre.appendChild(document.createTextNode(text.slice(end, span[0])));
      pre.appendChild(el("mark", {cls: "extracted", text: text.slice(span[0], span[1]), title: "extracted answer: " + fmt(sample.extracted)}));
      pre.appendChild(document.createTextNode(text.slice(span[1])));
    } else {
      pre.appendChild(document.createTextNode(text.slice(end)));
    }
    box.appendChild(pre);
    return box;
  }

  function programBlock(sample) {
    var box = el("div", {cls: "program"});
    box.appendChild(el("h4", {text: "program"}));
    box.appendChild(el("pre", {text: sample.program || ""}));
    box.appendChild(el("h4", {text: "stdout (exit " + fmt(sample.exit_status) + (sample.stopped ? ", stopped: " + sample.stopped : "") + ")"}));
    // stdout_parts: stdout cut around the judged line by graftbench (its own line ends, not only "\n")
    var stdout = sample.stdout || "", pre = el("pre", {cls: "stdout"}), parts = sample.stdout_parts;
    if (parts && parts.length === 3) {
      pre.appendChild(document.createTextNode(parts[0]));
      pre.appendChild(el("mark", {cls: "extracted", text: parts[1], title: "the line the verifier judged"}));
      pre.appendChild(document.createTextNode(parts[2]));
    } else {
      pre.appendChild(document.createTextNode(stdout));
    }
    box.appendChild(pre);
    if (sample.stderr_tail) { box.appendChild(el("h4", {text: "stderr (end)"})); box.appendChild(el("pre", {text: sample.stderr_tail})); }
    return box;
  }

  // Word-level diff (longest common subsequence); line-level when the texts are long.
  function tokens(text, words) { return words ? (text.match(/\s+|[^\s]+/g) || []) : (text.match(/[^\n]*\n|[^\n]+$/g) || []); }
  function diff(a, b) {
    var x = tokens(a, true), y = tokens(b, true);
    if ((x.length + 1) * (y.length + 1) > 4e6) { x = tokens(a, false); y = tokens(b, false); }
    if ((x.length + 1) * (y.length + 1) > 4e6) { return null; }
    var n = x.length, m = y.length, w = m + 1, table = new Uint32Array((n + 1) * w);
    for (var i = n - 1; i >= 0; i--) {
      for (var j = m - 1; j >= 0; j--) {
        table[i * w + j] = x[i] === y[j] ? table[(i + 1) * w + j + 1] + 1 : Math.max(table[(i + 1) * w + j], table[i * w + j + 1]);
      }
    }
    var out = [], p = 0, q = 0;
    while (p < n || q < m) {
      if (p < n && q < m && x[p] === y[q]) { out.push(["same", x[p]]); p++; q++; }
      else if (q < m && (p === n || table[p * w + q + 1] >= table[(p + 1) * w + q])) { out.push(["added", y[q]]); q++; }
      else { out.push(["removed", x[p]]); p++; }
    }
    return out;
  }
  function diffBlock(problem) {
    var box = el("section", {cls: "diff", id: "diff"});
    var withSamples = RUNS.map(function (_, r) { return r; }).filter(function (r) { return (problem.runs[r] || []).length; });
    if (withSamples.length < 2) { return null; }
    box.appendChild(el("h3", {text: "Diff of two runs' outputs"}));
    function picker(which) {
      var select = el("select", {id: "diff-" + which});
      withSamples.forEach(function (r) { select.appendChild(option(String(r), "run " + (r + 1) + ": " + RUNS[r].label, state[which] === r)); });
      select.addEventListener("change", function () { state[which] = Number(select.value); openProblem(problem.id); });
      return select;
    }
    if (withSamples.indexOf(state.diffA) < 0) { state.diffA = withSamples[0]; }
    if (withSamples.indexOf(state.diffB) < 0 || state.diffB === state.diffA) { state.diffB = withSamples[1] === state.diffA ? withSamples[0] : withSamples[1]; }
    box.appendChild(el("p", {}, [picker("diffA"), document.createTextNode(" against "), picker("diffB")]));
    var a = problem.runs[state.diffA][0].output || "", b = problem.runs[state.diffB][0].output || "";
    var parts = diff(a, b), pre = el("pre", {cls: "diff-text"});
    if (parts === null) { pre.appendChild(document.createTextNode("the outputs are too long to compare here")); }
    else {
      parts.forEach(function (part) {
        pre.appendChild(part[0] === "same" ? document.createTextNode(part[1]) :
          el(part[0] === "added" ? "ins" : "del", {text: part[1]}));
      });
    }
    box.appendChild(pre);
    return box;
  }

  function exampleBlock(sample) {
    var example = EXAMPLES[sample.artifact_id];
    if (!example) { return null; }
    var box = el("details", {cls: "example"});
    box.appendChild(el("summary", {text: "grafted example: " + fmt(example.problem_id) + " (answer " + fmt(example.answer) +
      (example.source ? ", " + example.source : "") + ", artifact " + short(example.artifact_id) + ")"}));
    if (example.note) { box.appendChild(el("p", {cls: "note", text: example.note})); }
    if (example.text) { box.appendChild(el("pre", {text: example.text})); }
    else if (example.problem_text) { box.appendChild(el("pre", {text: example.problem_text})); }
    else { box.appendChild(el("p", {cls: "note", text: "its text is not shown: give --store (and --problems for a reference solution)"})); }
    return box;
  }

  function sampleFacts(sample) {
    var facts = ["sample " + fmt(sample.sample_index), sample.verdict, "extracted " + fmt(sample.extracted),
      "finish " + fmt(sample.finish_reason), fmt(sample.decode_tokens) + " decode tokens"];
    if (sample.thinking_tokens !== null && sample.thinking_tokens !== undefined) { facts.push(fmt(sample.thinking_tokens) + " thinking"); }
    if (sample.route) { facts.push("route " + sample.route + (sample.similarity !== null ? " " + fmt(sample.similarity, 3) : "")); }
    if (sample.fallback) { facts.push("fallback " + sample.fallback); }
    if (sample.certified !== null && sample.certified !== undefined) { facts.push(sample.certified ? "certified" : "certificate MISMATCH"); }
    if (sample.copied !== null && sample.copied !== undefined) { facts.push(sample.copied ? "copied the example's answer" : "not a copy"); }
    facts.push(fmt(sample.wall_s, 2) + " s");
    return facts.join(" · ");
  }

  function openProblem(id) {
    state.opened = id;
    var problem = PROBLEMS.filter(function (p) { return p.id === id; })[0];
    var box = document.getElementById("detail");
    clear(box);
    if (!problem) { return; }
    box.appendChild(el("h2", {text: "Problem " + problem.id + " (" + problem.family + ")"}));
    box.appendChild(el("p", {cls: "key", text: "key: " + fmt(problem.key)}));
    if (problem.text !== null && problem.text !== undefined) {
      box.appendChild(el("pre", {cls: "problem-text", text: problem.text}));
      if (problem.text_matches === false) { box.appendChild(el("p", {cls: "warning", text: "this text's SHA-256 is not the one the runs record: the problem file is not the runs' problem set"})); }
    } else {
      box.appendChild(el("p", {cls: "note", text: DATA.problem_file ? "the problem file does not hold this problem" : "problem text not shown: give --problems FILE (manifests hold only its SHA-256)"}));
    }
    var columns = el("div", {cls: "outputs"});
    RUNS.forEach(function (run, r) {
      var col = el("section", {cls: "run-output", data: {run: r}});
      col.appendChild(el("h3", {text: "Run " + (r + 1) + ": " + run.label}));
      var samples = problem.runs[r] || [];
      if (!samples.length) { col.appendChild(el("p", {cls: "note", text: "no sample of this problem"})); }
      samples.forEach(function (sample) {
        var item = el("div", {cls: "sample", data: {verdict: sample.verdict}});
        item.appendChild(el("p", {cls: "facts v-" + sample.verdict.replace(" ", "-"), text: sampleFacts(sample)}));
        item.appendChild(outputBlock(sample));
        if (sample.program_mode) { item.appendChild(programBlock(sample)); }
        if (sample.artifact_id) { item.appendChild(exampleBlock(sample)); }
        col.appendChild(item);
      });
      columns.appendChild(col);
    });
    box.appendChild(columns);
    var d = diffBlock(problem);
    if (d) { box.appendChild(d); }
    renderTable();
  }

  var app = document.getElementById("app");
  app.appendChild(el("h1", {text: "graftbench view: " + RUNS.map(function (r) { return r.label; }).join(" · ")}));
  app.appendChild(header());
  app.appendChild(controls());
  app.appendChild(el("section", {id: "table"}));
  app.appendChild(el("section", {id: "detail"}));
  document.title = "graftbench view: " + RUNS.map(function (r) { return r.label; }).join(", ");
  renderTable();
  document.body.dataset.rendered = "true";
  window.graftbenchView = {open: openProblem, csv: csvText};
}());
