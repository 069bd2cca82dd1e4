"""The project's studies, each one module that registers its design (:class:`oar.studies.registry.Study`):
the config key it is declared under, its checks, the runs and seeds it plans, its tables. The registry of
studies and tables is ``oar.studies.registry``; ``oar.studies.catalogue`` registers the project's studies in
order. The run registry (``oar.experiment.runs``) and the config checks iterate the registered studies and
name none. The studies sit between ``oar.analysis`` (whose readings they call) and ``oar.experiment``
(which they never import: they take the run registry as an argument).
"""
