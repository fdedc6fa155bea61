"""The body of report.html: the answer first, then the findings (each said once), the tables,
the figures on the run's clock with the probes' panels, the diagnosis, errors and definitions."""

REPORT = """{% extends "base" %}{% import "macros" as m %}{% block body %}
<h1>llmbench report: {{ info.run_id }}</h1>
<p class="muted">{{ info.status }} · model {{ info.target.model }} · SLO {{ slos }}</p>
<div id="run-levels" data-levels='{{ levels_json|tojson }}'></div>

<section class="answer" id="answer"><h2>Answer</h2>
{{ m.answer(answer) }}
</section>

{% if capacity_rows %}<h2 id="capacity">Capacity search</h2>
{{ m.grid(capacity_header, capacity_rows, left=3) }}
<p class="muted">{{ capacity_note }}</p>{% endif %}

<h2 id="findings">Findings</h2>
<ul class="findings">{% for f in findings %}<li class="sev-{{ f.severity }}" data-kind="{{ f.kind }}"><span class="tag">{{ f.severity }}</span>{{ f.text }}</li>{% endfor %}
{% if not findings %}<li>none</li>{% endif %}</ul>
{% if benign %}<details id="expected-differences"><summary>{{ benign|length }} expected difference(s), explained</summary>
{% for f in benign %}<p data-kind="{{ f.kind }}"><b>{{ f.text }}</b><br>{{ f.detail }}</p>{% endfor %}</details>{% endif %}

<h2 id="summary">Summary</h2>
<table id="summary-table"><thead><tr>{% for h in summary_header %}<th>{{ h }}</th>{% endfor %}</tr></thead><tbody>
{% for r in summary_rows %}<tr>{% for c in r %}<td{% if loop.index == 13 %} class="{{ c }}"{% elif loop.index in (1, 14) %} class="l"{% endif %}>{{ c }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>
<p class="muted">* P99 from fewer than 100 samples (unreliable). Latency percentiles over the requests sent in each
level's measured window; throughput counts the tokens that arrived in the window and the requests that finished in
it; errors and timeouts beside every row; goodput counts the requests that met every SLO.{% if varied %}
in/out: ~ marks the mean measured prompt (output) tokens where the workload varies them or the server did not honour
the target (range in the percentiles table).{% endif %}</p>
{% if class_rows %}<h3>Request classes</h3>
<p>Levels whose requests have a few distinct prompt lengths (a mixed workload), summarized per length
(<code>level/in&lt;len&gt;</code>): the short requests' tail shows here, apart from the long prompts' own slow first token.</p>
<table id="class-table"><thead><tr>{% for h in summary_header %}<th>{{ h }}</th>{% endfor %}</tr></thead><tbody>
{% for r in class_rows %}<tr>{% for c in r %}<td{% if loop.index == 13 %} class="{{ c }}"{% elif loop.index in (1, 14) %} class="l"{% endif %}>{{ c }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>{% endif %}

<h2 id="plots">Scaling</h2>
{{ m.grid(scaling_header, scaling_rows, left=1) }}
<p class="muted">Linearity: throughput ÷ (the lowest load's × the load ratio). Efficiency: the share of the added
load that became throughput; under 0.25 the level is near the ceiling, and the knee is the last level before.</p>
{% for svg in scaling_figs %}<div class="fig">{{ svg|safe }}</div>{% endfor %}
<h3>Latency against throughput</h3><div class="fig">{{ latency_throughput_fig|safe }}</div>
<h3>TTFT and TPOT distributions</h3><div class="fig">{{ cdf_fig|safe }}</div>

<h2 id="timeline">Timeline</h2>
<p class="muted">Every figure below shares this time axis: dashed lines mark each level's measured window
{%- if diagnosis %}, red bands the spike windows <code>llmdiag p99</code> found{% endif %}. Hover a figure for its values.</p>
{% if timeline_fig %}{{ m.tfig(timeline_fig) }}{% endif %}
{% for sec in probe_sections %}<section class="probe" id="probe-{{ loop.index }}">
<h3>{{ sec.title }}</h3><p>{{ sec.intro }}</p>
{% for f in sec.figures %}{{ m.tfig(f) }}{% endfor %}
{% if sec.constants %}<p class="muted">Constant during the run:</p>{{ m.consts(sec.constants) }}{% endif %}
{% if sec.all_fields or sec.all_constants or sec.text_fields or sec.omitted %}<details class="allfields"><summary>all fields</summary>
{% for f in sec.all_fields %}{{ m.tfig(f) }}{% endfor %}
{% if sec.all_constants %}<p class="muted">Constant per-index fields:</p>{{ m.consts(sec.all_constants) }}{% endif %}
{% for k, vals in sec.text_fields.items() %}<p class="muted">{{ k }}: {{ vals|join(" · ") }}</p>{% endfor %}
{% for o in sec.omitted %}<p class="muted">not drawn: {{ o }}</p>{% endfor %}
</details>{% endif %}</section>
{% endfor %}
{% if not probe_sections %}<p class="muted">No probe data in this run (probes/ is empty).</p>{% endif %}

{% if diagnosis %}<h2 id="diagnosis">Diagnosis: why the tail is bad</h2>
<p><b>{{ diagnosis.headline }}</b> ({{ diagnosis.metric|upper }} tail; {{ diagnosis.spike_windows|length }} spike
window(s) covering {{ "%.1f"|format(diagnosis.spike_seconds) }} s; <code>llmdiag p99</code>, docs/diagnosis.md)</p>
{% if diagnosis.findings %}<table id="diagnosis-findings"><thead><tr><th>#</th><th>category</th><th>severity</th><th>finding</th>
<th>evidence</th><th>spike windows explained</th><th>next step</th></tr></thead><tbody>
{% for f in diagnosis.findings %}<tr><td>{{ loop.index }}</td><td class="l">{{ f.category }}</td><td class="l">{{ f.severity }}</td>
<td class="l">{{ f.title }}</td><td class="l">{% for k, v in (f.evidence or {}).items() %}{{ evidence_name(k) }} {{ fmt_evidence(k, v) }}{{ "; " if not loop.last }}{% endfor %}</td>
<td>{{ f.explains|length }}/{{ f.spike_windows }}</td><td class="l">{{ f.next_step }}</td></tr>{% endfor %}
</tbody></table>{% endif %}
{% if diagnosis.playbook %}<h3>Playbook {{ diagnosis.playbook.playbook }}</h3>
<table><thead><tr><th>step</th><th>check</th><th>status</th><th>evidence</th></tr></thead><tbody>
{% for st in diagnosis.playbook.steps %}<tr><td class="l"><code>{{ st.id }}</code></td><td class="l">{{ st.title }}</td>
<td class="l">{{ st.status }}</td><td class="l">{{ st.evidence }}</td></tr>{% endfor %}
</tbody></table>{% endif %}{% endif %}

<h2 id="errors">Errors</h2>
{% if error_rows %}{{ m.grid(["level", "kind", "count", "rate", "first error text"], error_rows, left=2) }}
{% else %}<p>No errors or timeouts in any measured window.</p>{% endif %}

<h2 id="details">All percentiles</h2>
{{ m.grid(detail_header, detail_rows, left=2) }}
{% if length_rows %}<h3>What was sent and received</h3>
{{ m.grid(["level", "target in/out", "prompt tokens mean (min–max)", "output tokens mean (min–max)"], length_rows, left=1) }}{% endif %}

<h2 id="config">Run configuration and target</h2>
<table class="kv">{% for k, v in config %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>{% endfor %}</table>
{{ m.definitions(definitions, tools_header, tools) }}
{% endblock %}"""
