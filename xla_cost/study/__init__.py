"""The study: the generated markdown pages of ``reports/`` and one model's page.

`plan` says what the pages analyse, `published` what they hold the counts
against, `published_runs` the published training runs the time model is held
out against (`published_record` their record, `published_runs_today` today's
machines'), `data` collects (each sweep once, through the results store), `views`
and `analytic` are what several pages read, `claims` judges the seeds' claims,
`depth` builds an unrolled program of many identical blocks from its compiles at two and three
blocks (the validation's), `pages` holds one module per page (a new module there is a new page),
`model_page` is one `xla_cost.Report`'s page, and `write` writes them
(`write_report`). It may import every layer below: `present`, `step`,
`count`, `compiled`, `parallel`, `analysis`, the zoo (`xla_cost.zoo`) and
`runs`; never `xla_cost.cli` nor the package root (`xla_cost/__init__`). Its
modules are light at import (the command line lists the pages): pandas,
matplotlib, jax and the layers that load them are imported inside the
functions that use them.
"""
