"""What a run leaves in its folder and how every part of Harmonics reads and writes it.

A run's processes (the workers, the controller, the runner, the simulator, the analysis and
the live view) meet only through files in the run folder. Their formats and the few ways to
write and read them live here, in one place, so that no back end imports another to learn a
file's layout.

  runs/files.py    atomic writes (temp file + rename), JSON-lines reading and appending
  runs/logs.py     the workers' iteration log and telemetry lines
  runs/control.py  control files (controller -> workers), the controller's status file,
                   done markers, a job spec's start time
  runs/rundata.py  a run directory read as the live view's sections (REST and analysis serve)

Nothing here imports the rest of the project.
"""
