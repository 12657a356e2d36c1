// fedqa page: ask (streamed answer over SSE), sources, routing bars, feedback on the answer and its sources,
// strategy comparison, evaluation reports.
// Plain JavaScript, no build step. Server data is always inserted as text, never as HTML.
"use strict";

const KEY_STORE = "fedqa.apiKey";
const $ = (id) => document.getElementById(id);

// Plain words for the answer modes we know; any other mode is shown by its name.
const MODES = {
  generative: ["Generated", "written by the language model from the sources below"],
  generated: ["Generated", "written by the language model from the sources below"],
  extractive: ["Quoted", "sentences quoted from the sources below"],
  quoted: ["Quoted", "sentences quoted from the sources below"],
  not_covered: ["Not covered", "the documentation does not cover this question"],
  retrieval: ["Retrieval only", "no answer was generated; the sources are ranked"],
  none: ["No answer", "no answer could be given"],
  by_product: ["By product", "the question fits several products: an answer for each, side by side"],
};

const schema = { strategies: [], defaultStrategy: null, strategyHelp: "", domainsFilter: false };

// ------------------------------------------------------------------ small DOM helpers
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}
const fmt = (x) => (typeof x === "number" ? x.toFixed(3) : "–");
const setStatus = (msg) => { $("status").textContent = msg || ""; };

// ------------------------------------------------------------------ API key and requests
class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function showKeyState() {
  const has = !!sessionStorage.getItem(KEY_STORE);
  $("key-state").textContent = has ? "API key set for this tab" : "No API key set";
  $("key-button").textContent = has ? "Change API key" : "Set API key";
}

// Opens the key dialog; resolves true when a key was saved.
function askForKey(reason) {
  const dialog = $("key-dialog");
  $("key-why").textContent = reason || "Enter the API key for this service.";
  $("key-input").value = "";
  return new Promise((resolve) => {
    const done = (saved) => {
      dialog.removeEventListener("close", onClose);
      $("key-cancel").removeEventListener("click", onCancel);
      showKeyState();
      resolve(saved);
    };
    const onClose = () => {
      const key = $("key-input").value.trim();
      if (dialog.returnValue === "save" && key) {
        sessionStorage.setItem(KEY_STORE, key);
        done(true);
        loadJobs(true);  // the list may have been refused without a key
        loadDomains();  // the products this key sees
      }
      else done(false);
    };
    const onCancel = () => { dialog.returnValue = "cancel"; dialog.close(); };
    dialog.returnValue = "";
    dialog.addEventListener("close", onClose);
    $("key-cancel").addEventListener("click", onCancel);
    dialog.showModal();
    $("key-input").focus();
  });
}

async function errorDetail(response) {
  try {
    const body = await response.json();
    return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  } catch (_) {
    return `${response.status} ${response.statusText}`;
  }
}

// fetch with the stored key as a Bearer header; on 401 asks for a key (unless quiet) and retries.
async function api(path, options = {}, quiet = false) {
  for (let attempt = 0; ; attempt++) {
    const headers = new Headers(options.headers || {});
    const key = sessionStorage.getItem(KEY_STORE);
    if (key) headers.set("Authorization", `Bearer ${key}`);
    const response = await fetch(path, { ...options, headers });
    if (response.status === 401 && !quiet && attempt < 3) {
      if (key) sessionStorage.removeItem(KEY_STORE);
      const why = key ? "The API key was refused; enter another." : "This service needs an API key.";
      if (await askForKey(why)) continue;
    }
    if (!response.ok) {
      const detail = await errorDetail(response);
      const wait = response.headers.get("Retry-After");
      throw new ApiError(response.status, wait ? `${detail} (retry in ${wait} s)` : detail);
    }
    return response;
  }
}

// Server-Sent Events from a fetch response: yields {event, data}.
async function* readEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

// ------------------------------------------------------------------ schema (strategies, filters)
function resolveRef(root, ref) {
  return ref.replace(/^#\//, "").split("/").reduce((node, part) => (node ? node[part] : undefined), root);
}

function enumOf(node, root) {
  if (!node) return null;
  if (node.$ref) return enumOf(resolveRef(root, node.$ref), root);
  if (Array.isArray(node.enum)) return node.enum;
  if (node.const !== undefined) return [node.const];
  for (const k of ["allOf", "anyOf", "oneOf"]) {
    if (!Array.isArray(node[k])) continue;
    const values = node[k].flatMap((s) => enumOf(s, root) || []);
    if (values.length) return values;
  }
  return null;
}

async function loadSchema() {
  try {
    const spec = await (await fetch("/openapi.json")).json();
    const props = spec.components.schemas.AskRequest.properties;
    schema.strategies = (enumOf(props.strategy, spec) || []).filter((s) => s !== null);
    schema.defaultStrategy = props.strategy ? props.strategy.default ?? null : null;
    schema.strategyHelp = (props.strategy && props.strategy.description) || "";
    schema.domainsFilter = !!props.domains;
  } catch (_) {
    setStatus("Could not read the API description (/openapi.json): only the service's default strategy is offered.");
  }
}

function fillStrategies() {
  const selects = [$("strategy"), $("compare-a"), $("compare-b")];
  for (const select of selects) {
    for (const name of schema.strategies) {
      const label = name === schema.defaultStrategy ? `${name} (default)` : name;
      select.append(el("option", { value: name, text: label }));
    }
  }
  if (schema.strategies.length) {
    $("strategy").querySelector("option[value='']").remove();
    $("strategy").value = schema.defaultStrategy || schema.strategies[0];
    $("compare-a").value = $("strategy").value;
    $("compare-b").value = schema.strategies.find((s) => s !== $("compare-a").value) || schema.strategies[0];
  }
  $("strategy-help").textContent = schema.strategyHelp;
}

// The products the key sees (all of them when keys are off); hidden until a key is known.
async function loadDomains() {
  if (!schema.domainsFilter) return;
  try {
    const body = await (await api("/domains", {}, true)).json();
    const boxes = $("domain-boxes");
    boxes.replaceChildren();
    for (const d of body.domains) {
      const id = `domain-${d.name}`;
      boxes.append(el("span", { class: "check" },
        el("input", { type: "checkbox", id, value: d.name, checked: true }), el("label", { for: id, text: d.name })));
    }
    $("domain-filter").hidden = false;
  } catch (_) { $("domain-filter").hidden = true; /* the filter is optional */ }
}

// ------------------------------------------------------------------ rendering
function citationLinks(text, nSources) {
  const frag = document.createDocumentFragment();
  const pattern = /\[(\d+(?:\s*,\s*\d+)*)\]/g;
  let last = 0;
  let m;
  while ((m = pattern.exec(text)) !== null) {
    frag.append(text.slice(last, m.index));
    const nums = m[1].split(",").map((s) => parseInt(s, 10));
    if (nums.every((n) => n >= 1 && n <= nSources)) {
      frag.append("[");
      nums.forEach((n, i) => {
        if (i) frag.append(", ");
        frag.append(el("a", { href: `#source-${n}`, class: "cite", "aria-label": `source ${n}`, text: String(n) }));
      });
      frag.append("]");
    } else {
      frag.append(m[0]);
    }
    last = pattern.lastIndex;
  }
  frag.append(text.slice(last));
  return frag;
}

function renderAnswerText(text, nSources) {
  $("answer").replaceChildren(citationLinks(text || "", nSources));
}

// An answer given by product: one column per product (its name, the router's probability, its answer, its passages).
function renderProducts(products, nSources) {
  const columns = products.map((p) => el("article", { class: "product", "data-domain": p.domain },
    el("h3", {}, el("span", { class: "product-name", text: p.domain }),
      el("span", { class: "meta", text: ` ${Math.round(p.probability * 100)}%` })),
    el("div", { class: "answer-text" }, citationLinks(p.answer || "", nSources)),
    el("p", { class: "meta product-docs", text: p.doc_ids.slice(0, 3).join(" · ") })));
  $("answer").replaceChildren(el("div", { class: "products" }, ...columns));
}

function renderMode(mode) {
  const [label, explain] = MODES[mode] || [mode, ""];
  const node = $("answer-mode");
  node.dataset.mode = mode;
  node.className = `mode mode-${mode}`;
  node.replaceChildren(el("strong", { text: label }), explain ? ` — ${explain}` : "");
  $("answer-section").classList.toggle("not-covered", mode === "not_covered");
}

// Strategies that choose their products without the gate: their threshold is reported but not used.
const GATELESS = { uis: "every product is searched", rfs: "the router's top product is searched", lfs: "an LLM chooses the products" };

function renderRouting(routing) {
  const list = $("routing-bars");
  list.replaceChildren();
  const active = new Set(routing.active_domains || []);
  const gateless = GATELESS[routing.strategy];
  const tau = gateless ? null : routing.threshold;
  const entries = Object.entries(routing.probabilities || {}).sort((a, b) => b[1] - a[1]);
  for (const [domain, p] of entries) {
    const fill = el("span", { class: "fill" });
    fill.style.width = `${Math.max(0, Math.min(1, p)) * 100}%`;
    const bar = el("span", {
      class: "bar", role: "meter", "aria-valuemin": 0, "aria-valuemax": 1, "aria-valuenow": p,
      "aria-valuetext": `${fmt(p)}${active.has(domain) ? ", searched" : ""}`, "aria-label": `p for ${domain}`,
      "data-domain": domain,
    }, fill);
    if (typeof tau === "number" && tau > 0 && tau <= 1) {
      const mark = el("span", { class: "tau", "data-tau": tau, title: `tau(q) = ${fmt(tau)}` });
      mark.style.left = `${tau * 100}%`;
      bar.append(mark);
    }
    const chance = gateless ? undefined : (routing.activation || {})[domain];
    const flag = (active.has(domain) ? "searched" : "not searched")
      + (typeof chance === "number" && chance < 1 ? ` · gate chance ${fmt(chance)}` : "");
    list.append(el("li", { class: active.has(domain) ? "route active" : "route", "data-domain": domain },
      el("span", { class: "name", text: domain }), bar, el("span", { class: "value", text: fmt(p) }),
      el("span", { class: "flag", text: flag })));
  }
  const parts = [`strategy ${routing.strategy || "?"}`, gateless ? `no gate: ${gateless}` : `τ(q) = ${fmt(tau)}`,
    `searched: ${(routing.active_domains || []).join(", ") || "none"}`, `gate ${routing.mode}`, `router ${routing.router}`];
  $("routing-summary").replaceChildren(parts.join(" · "));
  if (routing.fallback) {
    $("routing-summary").append(el("strong", { class: "fallback",
      text: " Fallback: no product was chosen, so the most likely one was searched." }));
  }
  if (routing.selector && routing.selector.votes) {
    const votes = Object.entries(routing.selector.votes).map(([d, v]) => `${d}: ${v ? "yes" : "no"}`).join(", ");
    $("routing-summary").append(el("span", { text: ` · LLM votes: ${votes}` }));
  }
}

// What placed a passage (a source's "features"): a short name and what it means; any other feature shows by its name.
const FEATURES = {
  similarity: ["s", "cosine similarity of the passage to the question"],
  product_probability: ["p_j", "the router's probability of the passage's product"],
  weight: ["w_j", "the strategy's weight on s for this product (where it is not p_j)"],
  page_prior: ["page prior", "bonus of a page that answered labelled questions"],
  known_answer: ["known answer", "similarity of the question to the nearest labelled question this passage answers"],
  known_answer_penalty: ["known-answer penalty", "what U lost because the question is not that one"],
  dense_rank: ["rank by U", "its place in the ranking by U, fused with the lexical one"],
  lexical_rank: ["rank by BM25", "its place in the ranking by its words (BM25), fused with the one by U"],
  bm25: ["BM25", "how well the passage's words match the question's"],
  rerank: ["reranker", "the reranker's logit: how well it reads the passage as an answer"],
  question_rank: ["rank in its question", "its place for its own question, when a message asks several"],
};
const RANKS = new Set(["dense_rank", "lexical_rank", "question_rank"]);
const fmtKey = (x) => (typeof x === "number" ? Number(x.toPrecision(4)).toString() : "–");

// "Why this passage": the key the sources are sorted by and the features that gave it.
function whyPassage(s) {
  const rows = Object.entries(s.features || {}).map(([name, value]) => {
    const [label, meaning] = FEATURES[name] || [name, ""];
    return el("div", { "data-feature": name, title: meaning || null },
      el("dt", { text: label }), el("dd", { text: RANKS.has(name) ? String(value) : fmt(value) }));
  });
  return el("details", { class: "why" },
    el("summary", {}, "Why this passage: rank score ", el("span", { text: fmtKey(s.rank_score), "data-score": "rank" })),
    el("p", { class: "meta", text: "The sources are sorted by rank score (highest first); it comes from these features "
      + "(hover a name for its meaning)." }),
    el("dl", { class: "features" }, ...rows));
}

function sourceCard(s, i) {
  const n = i + 1;
  const snippet = s.text.length > 320 ? `${s.text.slice(0, 300).trimEnd()}…` : s.text;
  const page = /^https?:\/\//.test(s.source) ? el("a", { href: s.source, rel: "noopener", text: s.source })
    : el("span", { text: s.source });
  const card = el("li", { class: "card", id: `source-${n}`, tabindex: "-1", "data-doc-id": s.doc_id },
    el("h3", {}, el("span", { class: "num", text: `[${n}]` }), " ", el("span", { class: "title", text: s.title })),
    el("p", { class: "where" }, el("span", { class: "product", text: s.domain }), " · ", page),
    el("p", { class: "snippet", text: snippet }));
  if (snippet !== s.text) {
    card.append(el("details", {}, el("summary", { text: "Whole passage" }), el("p", { text: s.text })));
  }
  card.append(el("dl", { class: "scores" },
    el("div", {}, el("dt", { text: "s" }), el("dd", { text: fmt(s.score), "data-score": "s" })),
    el("div", {}, el("dt", { text: "p_j" }), el("dd", { text: fmt(s.domain_prob), "data-score": "p" })),
    el("div", {}, el("dt", { text: "w_j" }), el("dd", { text: fmt(s.domain_weight), "data-score": "w" })),
    el("div", {}, el("dt", { text: "U" }), el("dd", { text: fmt(s.unified_score), "data-score": "u" })),
    ...(s.rerank_score == null ? [] : [el("div", { title: "reranker: P(this passage answers the question)" },
      el("dt", { text: "rerank" }), el("dd", { text: fmt(s.rerank_score), "data-score": "rerank" }))])));
  card.append(whyPassage(s));
  const answered = el("button", { type: "button", class: "fb answered", "aria-pressed": "false",
    "aria-label": `This answered it: source ${n}`, text: "This answered it" });
  const note = el("span", { class: "feedback-status", role: "status", "aria-live": "polite" });
  answered.addEventListener("click", () => sendFeedback({ rating: "up", doc_id: s.doc_id }, answered, note,
    `Recorded: source ${n} answered the question.`));
  card.append(el("div", { class: "feedback-row card-feedback" }, answered, note));
  return card;
}

function renderSources(sources) {
  $("sources").replaceChildren(...sources.map(sourceCard));
  if (!sources.length) $("sources").append(el("li", { class: "empty", text: "No passage matched." }));
}

function markCited(citations) {
  const cited = new Set(citations || []);
  document.querySelectorAll("#sources .card").forEach((card, i) => card.classList.toggle("cited", cited.has(i + 1)));
}

// ------------------------------------------------------------------ feedback (POST /feedback)
// The question the results on show answer, and the passage their answer quoted first (what the thumbs rate).
const shown = { query: null, answerDoc: null };

// The passage an answer quoted: its first citation's, a by-product answer's first product's top passage, else the top source.
function answerPassage(data) {
  const sources = data.sources || [];
  const first = (data.citations || [])[0];
  if (first >= 1 && first <= sources.length) return sources[first - 1].doc_id;
  if (data.products && data.products.length && data.products[0].doc_ids.length) return data.products[0].doc_ids[0];
  return sources.length ? sources[0].doc_id : null;
}

// Sends feedback on the question on show with the tab's key (as /ask); the button is marked and the note says what
// was recorded, or the error (e.g. 403, 429 with its wait).
async function sendFeedback(fields, button, note, done) {
  if (!shown.query) return;
  const group = button.parentElement.querySelectorAll("button.fb");
  group.forEach((b) => { b.disabled = true; });
  note.classList.remove("error");
  note.dataset.state = "sending";
  note.textContent = "Sending…";
  try {
    const body = await (await api("/feedback", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ query: shown.query, ...fields }),
    })).json();
    group.forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
    note.dataset.state = "sent";
    note.dataset.feedbackId = body.id;
    note.textContent = `${done} Thank you.`;
  } catch (err) {
    note.dataset.state = "error";
    note.classList.add("error");
    note.textContent = `Feedback not sent: error${err.status ? ` ${err.status}` : ""}: ${err.message}`;
  } finally {
    group.forEach((b) => { b.disabled = false; });
  }
}

// The controls that fit the answer on show: thumbs for an answer, agree/disagree for "not covered", none otherwise.
function showFeedback(data) {
  shown.answerDoc = answerPassage(data);
  const refused = data.answer_mode === "not_covered";
  const answered = !refused && !!(data.answer || (data.products && data.products.length)) && !!shown.answerDoc;
  $("rate-answer").hidden = !answered;
  $("rate-refusal").hidden = !refused;
  $("answer-feedback").hidden = !(answered || refused);
}

function resetFeedback(query) {
  shown.query = query;
  shown.answerDoc = null;
  $("answer-feedback").hidden = true;
  document.querySelectorAll("#answer-feedback button.fb").forEach((b) => b.setAttribute("aria-pressed", "false"));
  const note = $("feedback-status");
  note.textContent = "";
  note.classList.remove("error");
  delete note.dataset.state;
  delete note.dataset.feedbackId;
}

// ------------------------------------------------------------------ asking
function askBody(extra = {}) {
  const body = { query: $("question").value.trim() };
  if ($("strategy").value) body.strategy = $("strategy").value;
  if ($("seed").value !== "") body.seed = parseInt($("seed").value, 10);
  if ($("top-k").value !== "") body.top_k = parseInt($("top-k").value, 10);
  if (!$("generate").checked) body.generate = false;
  if (schema.domainsFilter) {
    const boxes = [...document.querySelectorAll("#domain-boxes input")];
    const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
    if (chosen.length && chosen.length < boxes.length) body.domains = chosen;
  }
  return { ...body, ...extra };
}

function shareAddress(compare) {
  const params = new URLSearchParams();
  params.set("q", $("question").value.trim());
  if ($("strategy").value) params.set("strategy", $("strategy").value);
  if ($("seed").value !== "") params.set("seed", $("seed").value);
  if ($("top-k").value !== "") params.set("top_k", $("top-k").value);
  if (!$("generate").checked) params.set("generate", "0");
  if (compare) params.set("compare", `${$("compare-a").value},${$("compare-b").value}`);
  history.replaceState(null, "", `${location.pathname}?${params}`);
}

let busy = false;

async function ask() {
  if (busy || !$("question").value.trim()) return;
  busy = true;
  const section = $("answer-section");
  section.dataset.state = "streaming";
  section.setAttribute("aria-busy", "true");
  $("ask-button").disabled = true;
  $("results").hidden = false;
  $("answer").replaceChildren();
  $("answer-error").hidden = true;
  $("answer-meta").textContent = "";
  $("answer-mode").dataset.mode = "";
  $("answer-mode").className = "mode";
  $("answer-mode").replaceChildren(el("strong", { text: "Answering…" }));
  section.classList.remove("not-covered");
  resetFeedback($("question").value.trim());
  setStatus("Searching…");
  shareAddress(false);
  let text = "";
  let nSources = 0;
  try {
    const response = await api("/ask", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(askBody({ stream: true })),
    });
    for await (const { event, data } of readEvents(response)) {
      if (event === "retrieval") {
        nSources = data.sources.length;
        renderRouting(data.routing);
        renderSources(data.sources);
        setStatus("Sources found; answering…");
      } else if (event === "token") {
        text += data.text;
        renderAnswerText(text, nSources);
      } else if (event === "done") {
        finish(data);
      } else if (event === "error") {
        throw new ApiError(data.status, data.detail);
      }
    }
    if (section.dataset.state !== "done") throw new ApiError(0, "the answer stream ended early");
  } catch (err) {
    section.dataset.state = "error";
    $("answer-mode").replaceChildren(el("strong", { text: "No answer" }));
    $("answer-error").hidden = false;
    $("answer-error").textContent = `Error${err.status ? ` ${err.status}` : ""}: ${err.message}`;
    setStatus("The question could not be answered.");
  } finally {
    busy = false;
    section.removeAttribute("aria-busy");
    $("ask-button").disabled = false;
  }
}

function finish(data) {
  const section = $("answer-section");
  renderRouting(data.routing);
  renderSources(data.sources);
  renderMode(data.answer_mode);
  if (data.products && data.products.length) renderProducts(data.products, data.sources.length);
  else if (data.answer) renderAnswerText(data.answer, data.sources.length);
  else $("answer").replaceChildren();
  markCited(data.citations);
  showFeedback(data);
  if (data.error) {
    $("answer-error").hidden = false;
    $("answer-error").textContent = data.error;
  }
  const total = data.timings_ms && data.timings_ms.total;
  const v = data.versions || {};
  $("answer-meta").textContent = [total ? `${Math.round(total)} ms` : null, v.index && `index ${v.index}`,
    v.llm && `LLM ${v.llm}`].filter(Boolean).join(" · ");
  section.dataset.state = "done";
  setStatus(`Answered (${MODES[data.answer_mode] ? MODES[data.answer_mode][0] : data.answer_mode}).`);
}

// ------------------------------------------------------------------ compare
function rankingColumn(strategy, body, otherIds) {
  const items = body.sources.map((s, i) => {
    const elsewhere = otherIds.indexOf(s.doc_id);
    return el("li", { class: elsewhere >= 0 ? "shared" : "only", "data-doc-id": s.doc_id },
      el("span", { class: "title", text: s.title }),
      el("span", { class: "where", text: `${s.domain} · U ${fmt(s.unified_score)} · s ${fmt(s.score)} · p_j ${fmt(s.domain_prob)} · w_j ${fmt(s.domain_weight)}`
        + (s.rerank_score == null ? "" : ` · rerank ${fmt(s.rerank_score)}`) + ` · rank score ${fmtKey(s.rank_score)}` }),
      el("span", { class: "other", text: elsewhere >= 0 ? `also #${elsewhere + 1} on the other side` : "only here" }));
  });
  const r = body.routing;
  return [el("h3", { text: strategy, "data-strategy": strategy }),
    el("p", { class: "meta", text: `searched: ${r.active_domains.join(", ") || "none"}${r.fallback ? " (fallback)" : ""}` }),
    el("ol", { class: "ranking" }, ...items)];
}

async function compare() {
  const query = $("question").value.trim();
  if (!query) { setStatus("Type a question first, then compare."); $("question").focus(); return; }
  const [a, b] = [$("compare-a").value, $("compare-b").value];
  const grid = $("compare-grid");
  grid.dataset.state = "loading";
  setStatus(`Comparing ${a} and ${b}…`);
  try {
    const seed = $("seed").value !== "" ? {} : { seed: Math.floor(Math.random() * 1e9) };
    const run = async (strategy) => (await api("/ask", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(askBody({ ...seed, strategy, generate: false, stream: false })),
    })).json();
    const left = await run(a);
    const right = await run(b);
    const ids = (body) => body.sources.map((s) => s.doc_id);
    $("compare-left").replaceChildren(...rankingColumn(a, left, ids(right)));
    $("compare-right").replaceChildren(...rankingColumn(b, right, ids(left)));
    grid.hidden = false;
    grid.dataset.state = "done";
    const same = ids(left).filter((d) => ids(right).includes(d)).length;
    setStatus(`Compared ${a} and ${b}: ${same} of ${left.sources.length} passages in both.`);
    shareAddress(true);
  } catch (err) {
    grid.dataset.state = "error";
    setStatus(`Comparison failed: ${err.message}`);
  }
}

// ------------------------------------------------------------------ evaluation reports
async function loadJobs(quiet) {
  $("eval-status").textContent = "Loading…";
  try {
    const { jobs } = await (await api("/evaluate", {}, quiet)).json();
    $("eval-list").replaceChildren(...jobs.map(jobItem));
    $("eval-status").textContent = jobs.length === 1 ? "1 evaluation job."
      : jobs.length ? `${jobs.length} evaluation jobs.` : "No evaluation jobs yet.";
    $("eval-refresh").textContent = "Refresh the list";
  } catch (err) {
    $("eval-status").textContent = err.status === 401 ? "Set an API key to list the evaluation jobs."
      : `Could not list the evaluation jobs: ${err.message}`;
  }
}

function jobItem(job) {
  const spec = job.spec || {};
  const when = job.created ? new Date(job.created * 1000).toLocaleString() : "";
  const what = `${spec.dataset || "inline"} · ${(spec.strategies || []).join(", ")} · ${(spec.metrics || []).join(", ")}`;
  const item = el("li", { "data-job": job.id },
    el("span", { class: "job-what", text: what }),
    el("span", { class: "meta", text: `${job.status} · ${job.progress.done}/${job.progress.total} · ${when}` }));
  if (job.status === "done") {
    const button = el("button", { type: "button", text: "Open report", "aria-label": `Open report ${job.id}` });
    button.addEventListener("click", () => openReport(job.id, what));
    item.append(button);
  }
  return item;
}

async function openReport(id, what) {
  $("eval-status").textContent = "Opening the report…";
  try {
    const html = await (await api(`/evaluate/${encodeURIComponent(id)}/report`)).text();
    $("report-frame").srcdoc = html;
    const link = $("report-download");
    if (link.href.startsWith("blob:")) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(new Blob([html], { type: "text/html" }));
    link.download = `fedqa-report-${id}.html`;
    $("report-title").textContent = `Report: ${what}`;
    $("report-view").hidden = false;
    $("report-view").dataset.job = id;
    $("report-title").focus();
    $("eval-status").textContent = "";
  } catch (err) {
    $("eval-status").textContent = `Could not open the report: ${err.message}`;
  }
}

// ------------------------------------------------------------------ start
function fromAddress() {
  const params = new URLSearchParams(location.search);
  const set = (id, name) => { if (params.has(name)) $(id).value = params.get(name); };
  set("question", "q");
  const strategy = params.get("strategy");
  if (strategy && [...$("strategy").options].some((o) => o.value === strategy)) $("strategy").value = strategy;
  else if (strategy) setStatus(`Unknown strategy "${strategy}"; using ${$("strategy").value || "the default"}.`);
  set("seed", "seed");
  set("top-k", "top_k");
  if (params.get("generate") === "0") $("generate").checked = false;
  const pair = (params.get("compare") || "").split(",").filter(Boolean);
  if (pair.length) {
    $("compare-a").value = pair.length > 1 ? pair[0] : $("strategy").value;
    $("compare-b").value = pair[pair.length - 1];
  }
  return { ask: !!params.get("q"), compare: pair.length > 0 };
}

async function start() {
  showKeyState();
  $("ask-form").addEventListener("submit", (e) => { e.preventDefault(); ask(); });
  $("compare-form").addEventListener("submit", (e) => { e.preventDefault(); compare(); });
  $("key-button").addEventListener("click", () => askForKey("Enter the API key for this service."));
  $("eval-refresh").addEventListener("click", () => loadJobs(false));
  $("report-close").addEventListener("click", () => { $("report-view").hidden = true; $("eval-refresh").focus(); });
  const note = $("feedback-status");
  $("fb-up").addEventListener("click", (e) => sendFeedback({ rating: "up", doc_id: shown.answerDoc }, e.currentTarget, note,
    "Recorded: the answer answered your question."));
  $("fb-down").addEventListener("click", (e) => sendFeedback({ rating: "down", doc_id: shown.answerDoc }, e.currentTarget, note,
    "Recorded: the answer did not answer your question; mark the source that did, if one is listed."));
  $("fb-not-covered").addEventListener("click", (e) => sendFeedback({ not_covered: true }, e.currentTarget, note,
    "Recorded: the documentation does not cover this question."));
  $("fb-covered").addEventListener("click", (e) => sendFeedback({ rating: "down" }, e.currentTarget, note,
    "Recorded: the documentation does cover it; mark the source that answers it, if one is listed."));
  $("answer").addEventListener("click", (e) => {
    const link = e.target.closest("a.cite");
    if (!link) return;
    e.preventDefault();
    const card = document.querySelector(link.getAttribute("href"));
    if (card) { card.focus(); card.scrollIntoView({ block: "nearest" }); }
  });
  await loadSchema();
  fillStrategies();
  await loadDomains();
  const todo = fromAddress();
  document.body.dataset.ready = "true";
  loadJobs(true);
  if (todo.ask) await ask();
  if (todo.compare) await compare();
}

document.addEventListener("DOMContentLoaded", start);
