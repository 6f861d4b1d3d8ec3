# syntax=docker/dockerfile:1
# One image per service, from one Dockerfile:
#   docker build --build-arg SERVICE=cordon -t opswire/opswire-cordon:dev .
# (`make images` builds all five). The binary is static (CGO_ENABLED=0) with
# the time-zone database embedded (sendReport.timezone / $TZ work on scratch),
# and runs as a non-root user on an empty base: no shell, no package manager.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
ARG SERVICE
ARG VERSION=dev
RUN test -n "$SERVICE" || (echo "build with --build-arg SERVICE=<watcher|cordon|cleanup|report|notifier>" >&2; exit 1)
WORKDIR /src
# Each service builds as its own module (GOWORK=off), with shared/ through
# its replace directive. Dependencies first, for the layer cache.
ENV GOWORK=off CGO_ENABLED=0
COPY shared/go.mod shared/go.sum shared/
COPY services/${SERVICE}/go.mod services/${SERVICE}/go.sum services/${SERVICE}/
RUN --mount=type=cache,target=/go/pkg/mod cd services/${SERVICE} && go mod download
COPY shared/ shared/
COPY services/${SERVICE}/ services/${SERVICE}/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd services/${SERVICE} && go build -trimpath -tags timetzdata \
      -ldflags "-s -w -X github.com/opswire/opswire/shared/app.Version=${VERSION}" -o /out/opswire . \
    && /out/opswire --version

FROM scratch
ARG SERVICE
LABEL org.opencontainers.image.title="opswire-${SERVICE}" \
      org.opencontainers.image.description="opswire ${SERVICE}: Kubernetes cluster operations over NATS"
# CA bundle for HTTPS (Feishu webhooks, the API server).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/opswire /opswire
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/opswire"]
