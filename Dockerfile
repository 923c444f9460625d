# Runwright: one image for the worker, beat, Flower and `runwright migrate`.
#   docker build -t runwright .
# The dependencies come from requirements.lock only, every one hash-checked.
FROM python:3.11-slim

# LITELLM_LOCAL_MODEL_COST_MAP: importing litellm must never reach the network.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    LITELLM_LOCAL_MODEL_COST_MAP=True

RUN groupadd --system --gid 10001 runwright \
    && useradd --system --uid 10001 --gid runwright \
        --home-dir /home/runwright --create-home --shell /usr/sbin/nologin runwright

WORKDIR /app

# Dependencies first, in their own layer: it is rebuilt only when the lock changes.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

# Then Runwright itself (setuptools and wheel come from the lock, so no build
# isolation and nothing unpinned is fetched).
COPY . .
RUN pip install --no-deps --no-build-isolation . \
    && rm -rf build ./*.egg-info

USER runwright
# PYTHONPATH: the `celery` and `runwright` scripts do not put the working
# directory on sys.path, and agent modules (RUNWRIGHT_AGENTS, e.g.
# examples.agents) live in /app. RUNWRIGHT_HOME: only the embedded local stack
# writes there; the compose stack uses real services.
ENV PYTHONPATH=/app \
    RUNWRIGHT_HOME=/home/runwright/.runwright

# SIGTERM (docker stop) is Celery's warm shutdown: executions drain, settle
# `interrupted` and are enqueued again. Exec form, so Celery gets the signal.
CMD ["celery", "-A", "tasks", "worker", "-l", "INFO"]
