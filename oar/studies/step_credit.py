"""Where the weight goes during training (``training.oar.log_step_credit``; config/studies/oar-p-credit.yaml,
exploratory): the share of each step's decisive tokens in the main runs' weight, the ``step_credit`` table.
The mechanism table reads the same logs as its mediator, so a mechanism run makes no table of its own here.
"""

from __future__ import annotations

from oar.studies.registry import Study, Table


def build_table(smk):
    import pandas as pd

    from oar.analysis.step_credit import step_credit_table

    return step_credit_table(pd.read_csv(smk.input.curves))


STUDY = Study(
    name="step_credit", key="training.oar.log_step_credit",
    tables=(Table("step_credit", made=lambda reg: reg.logs_step_credit() and not reg.mechanism,
                  reads=lambda reg, rules: {"curves": f"{reg.results}/analysis/credit/main.csv"},
                  build=build_table),),
)
