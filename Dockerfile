# The tokenscope image: the release binary on a slim Debian, for the
# Kubernetes Job in deploy/kubernetes/ (docs/distributed.md).
#
#   docker build -t tokenscope:dev .
#   docker run --rm tokenscope:dev bench --help
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tokenscope \
    && strip target/release/tokenscope

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/tokenscope /usr/local/bin/tokenscope
# Not root: a load generator needs no privilege (it raises its own open-file
# soft limit to the hard limit the pod is given).
RUN useradd --uid 10001 --no-create-home tokenscope
USER 10001
ENTRYPOINT ["tokenscope"]
