"""The body of compare.html: the verdict first (per metric, with the levels where it moved), the
verdict matrix, then every delta with its interval."""

COMPARE = """{% extends "base" %}{% import "macros" as m %}{% block body %}
<h1>llmbench comparison</h1>
{% for c in comparisons %}{% set cmp_loop = loop %}
<h2>A = {{ c.run_a }} · B = {{ c.run_b }}</h2>
<section class="answer" id="verdict-{{ cmp_loop.index }}"><h2>Verdict</h2>{{ m.answer(answers[cmp_loop.index0]) }}</section>
<p class="muted">B − A with its 95% bootstrap interval; within noise (≈): the interval contains 0 or the change is under
{{ "%g"|format(min_effect * 100) }}%.</p>
{% set metrics, mrows = matrices[cmp_loop.index0] %}
{% if mrows %}<table class="matrix" id="matrix-{{ cmp_loop.index }}"><thead><tr><th class="l">level</th>{% for mt in metrics %}<th>{{ mt }}</th>{% endfor %}</tr></thead>
<tbody>{% for r in mrows %}<tr>{% for text, cls in r %}<td class="{{ cls }}">{{ text }}</td>{% endfor %}</tr>{% endfor %}</tbody></table>{% endif %}
<details><summary>every delta with its interval</summary>
<table class="compare"><thead><tr><th class="l">level</th><th class="l">metric</th><th>A</th><th>B</th><th>B − A</th>
<th>95% CI of B − A</th><th class="l">verdict</th></tr></thead><tbody>
{% for lc in c.levels %}{% for d in lc.deltas %}<tr><td class="l">{{ lc.level_id if loop.first else "" }}</td>
<td class="l">{{ d.metric }}</td><td>{{ fmt_value(d.metric, d.a) }}</td><td>{{ fmt_value(d.metric, d.b) }}</td>
<td>{{ fmt_delta(d) }}</td><td>{{ fmt_ci(d.metric, d.ci) }}</td>
<td class="l {{ {'better': 'better', 'worse': 'worse'}.get(d.verdict, 'noise') }}">{{ d.verdict }}</td></tr>
{% endfor %}{% endfor %}</tbody></table></details>
{% endfor %}
<h2>Runs</h2>
{% for name, rows in configs %}<h3>{{ name }}</h3>
<table class="kv">{% for k, v in rows %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>{% endfor %}</table>{% endfor %}
{{ m.definitions(definitions, tools_header, tools) }}
{% endblock %}"""
