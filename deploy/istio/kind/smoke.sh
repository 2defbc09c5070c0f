#!/usr/bin/env bash
# Smoke test of fairshare in a kind cluster (docs/quickstart-kind.md): builds
# plugin.wasm and the vLLM simulator into the image fairshare-kind:dev, loads
# it into the cluster, applies deploy/istio/kind (the gateway kit in front of
# the simulator), waits for it, then sends chat completions through the
# gateway (kubectl port-forward) with each team's token and checks what the
# plugin answers: the x-fairshare-* response headers, a within-share request
# at priority 0 counted as the token's user whatever x-user the client
# sent, and a team sending more than its share borrowing (priority 10 or
# more). One PASS or FAIL line per check; exit status 1 if any failed.
#
# It needs a cluster with Istio installed as docs/quickstart-kind.md says,
# and docker, kind, kubectl, curl, make and go on the PATH. It is not run in
# CI (there is no cluster there); internal/manifests checks that it parses
# and that the names it uses are the kit's and the plugin's.
set -eu
set -o pipefail

usage() {
	echo "usage: deploy/istio/kind/smoke.sh [--no-build] [--cleanup] [--help]"
	echo "  --no-build  apply and test the image already loaded (skip make build, docker build, kind load)"
	echo "  --cleanup   delete the kit (kubectl delete -k deploy/istio/kind/) when done, whatever the result"
	echo "environment: CLUSTER (kind cluster name, default fairshare), LOCAL_PORT (port-forward, default 18080),"
	echo "             TIMEOUT (each rollout wait, default 300s)"
}

# Names of the kit and of the plugin; internal/manifests (TestKindSmokeScript)
# checks each against deploy/istio/kind and plugin/response.go.
KIT=deploy/istio/kind
NAMESPACE=llm-serving
GATEWAY_DEPLOYMENT=llm-gateway
GATEWAY_SERVICE=llm-gateway
GATEWAY_PORT=80
VLLM_DEPLOYMENT=vllm
IMAGE=fairshare-kind:dev
POOL=llama-8b
MODEL=meta-llama/Llama-3.1-8B-Instruct
TEAM_HEADER=x-team
USER_HEADER=x-user
WITHIN_TEAM=search
WITHIN_USER=kind-search
BORROWER=research
BORROWER_REQUESTS=4
HEADER_TEAM=x-fairshare-team
HEADER_POOL=x-fairshare-pool
HEADER_PRIORITY=x-fairshare-priority
HEADER_BORROWING=x-fairshare-borrowing
HEADER_QUEUE_TIME=x-fairshare-queue-time
HEADER_USER=x-fairshare-user

CLUSTER=${CLUSTER:-fairshare}
LOCAL_PORT=${LOCAL_PORT:-18080}
TIMEOUT=${TIMEOUT:-300s}
BUILD=1
CLEANUP=0
for arg in "$@"; do
	case $arg in
	--no-build) BUILD=0 ;;
	--cleanup) CLEANUP=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "smoke.sh: unknown argument $arg" >&2; usage >&2; exit 2 ;;
	esac
done

cd "$(dirname "$0")/../../.."
WORK=$(mktemp -d)
PF_PID=
PASSED=0
FAILED=0

finish() {
	status=$?
	if [ -n "$PF_PID" ]; then
		kill "$PF_PID" 2>/dev/null || true
	fi
	if [ "$CLEANUP" = 1 ]; then
		echo "cleanup: kubectl delete -k $KIT/"
		kubectl delete -k "$KIT/" --ignore-not-found --wait=true --timeout="$TIMEOUT" || true
	fi
	rm -rf "$WORK"
	exit "$status"
}
trap finish EXIT

pass() { PASSED=$((PASSED + 1)); echo "PASS $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $*"; }

for tool in kind kubectl curl docker; do
	command -v "$tool" >/dev/null || { echo "smoke.sh: $tool not found on the PATH" >&2; exit 2; }
done
kind get clusters 2>/dev/null | grep -qx "$CLUSTER" || {
	echo "smoke.sh: no kind cluster named $CLUSTER (kind create cluster --name $CLUSTER; docs/quickstart-kind.md)" >&2
	exit 2
}
kubectl get crd wasmplugins.extensions.istio.io >/dev/null 2>&1 || {
	echo "smoke.sh: Istio's CRDs are not installed (istioctl install; docs/quickstart-kind.md)" >&2
	exit 2
}

if [ "$BUILD" = 1 ]; then
	echo "build: plugin.wasm, the simulator, $IMAGE"
	make build
	mkdir -p build/kind
	cp plugin.wasm build/kind/plugin.wasm
	# The simulator for the kind nodes' architecture (docker's server).
	CGO_ENABLED=0 GOOS=linux GOARCH="$(docker version --format '{{.Server.Arch}}')" \
		go build -trimpath -o build/kind/vllmsim ./cmd/vllmsim
	docker build -t "$IMAGE" -f "$KIT/Dockerfile" build/kind
	kind load docker-image "$IMAGE" --name "$CLUSTER"
fi

echo "apply: kubectl apply -k $KIT/"
kubectl apply -k "$KIT/"
for d in "$VLLM_DEPLOYMENT" "$GATEWAY_DEPLOYMENT"; do
	if kubectl -n "$NAMESPACE" rollout status "deployment/$d" --timeout="$TIMEOUT"; then
		pass "deployment/$d ready"
	else
		fail "deployment/$d not ready within $TIMEOUT"
		kubectl -n "$NAMESPACE" get pods -o wide || true
		exit 1
	fi
done

kubectl -n "$NAMESPACE" port-forward "service/$GATEWAY_SERVICE" "$LOCAL_PORT:$GATEWAY_PORT" >"$WORK/port-forward.log" 2>&1 &
PF_PID=$!
URL=http://127.0.0.1:$LOCAL_PORT

# header FILE NAME: the value of the response header NAME in FILE (curl -D),
# matched case-insensitively; empty when absent.
header() {
	tr -d '\r' <"$1" | awk -v k="$2" 'tolower(substr($0, 1, index($0, ":") - 1)) == k { sub(/^[^:]*:[ ]*/, ""); print; exit }'
}

# chat OUT TOKEN MAX_TOKENS [curl args...]: one chat completion through the
# gateway; the headers in OUT.h, the body in OUT.b, the status printed.
chat() {
	out=$1 token=$2 max=$3
	shift 3
	auth=()
	if [ -n "$token" ]; then
		auth=(-H "Authorization: Bearer $(cat "$KIT/tokens/$token.jwt")")
	fi
	# curl prints 000 for the status when it gets no answer. The empty
	# array's expansion is spelt for bash 3.2 (macOS) under set -u.
	curl -sS --max-time 120 -o "$out.b" -D "$out.h" -w '%{http_code}' ${auth[@]+"${auth[@]}"} "$@" \
		-H 'content-type: application/json' "$URL/v1/chat/completions" \
		-d '{"model":"'"$MODEL"'","messages":[{"role":"user","content":"hi"}],"max_tokens":'"$max"'}' || true
}

# The port-forward and the plugin's configuration (pushed by istiod after the
# pod is ready) take a moment: retry the first request for up to a minute.
status=000
for _ in $(seq 1 30); do
	status=$(chat "$WORK/first" "$WITHIN_TEAM" 4)
	if [ "$status" = 200 ] && [ -n "$(header "$WORK/first.h" "$HEADER_TEAM")" ]; then
		break
	fi
	sleep 2
done
if [ "$status" = 200 ] && [ -n "$(header "$WORK/first.h" "$HEADER_TEAM")" ]; then
	pass "gateway answers through the port-forward, the plugin is loaded ($HEADER_TEAM present)"
else
	fail "no answer with $HEADER_TEAM from $URL within a minute (last status $status; port-forward: $(tail -1 "$WORK/port-forward.log" 2>/dev/null))"
	exit 1
fi

# 1. Identity: no token, or a token without the team claim, is refused.
s=$(chat "$WORK/anon" "" 4)
if [ "$s" = 403 ]; then pass "no token: 403"; else fail "no token: status $s, want 403"; fi
s=$(chat "$WORK/noteam" no-team 4)
if [ "$s" = 403 ]; then pass "token without a team claim: 403"; else fail "token without a team claim: status $s, want 403"; fi

# 2. A within-share request and its headers; the client's own team and
# user headers are replaced by the token's claims (team, sub).
s=$(chat "$WORK/within" "$WITHIN_TEAM" 8 -H "$TEAM_HEADER: $BORROWER" -H "$USER_HEADER: mallory")
team=$(header "$WORK/within.h" "$HEADER_TEAM")
user=$(header "$WORK/within.h" "$HEADER_USER")
pool=$(header "$WORK/within.h" "$HEADER_POOL")
prio=$(header "$WORK/within.h" "$HEADER_PRIORITY")
borrowing=$(header "$WORK/within.h" "$HEADER_BORROWING")
queued=$(header "$WORK/within.h" "$HEADER_QUEUE_TIME")
if [ "$s" = 200 ] && [ "$team" = "$WITHIN_TEAM" ] && [ "$pool" = "$POOL" ] && [ "$prio" = 0 ] && [ "$borrowing" = false ] && [ -n "$queued" ]; then
	pass "$WITHIN_TEAM within share: $HEADER_TEAM $team, $HEADER_POOL $pool, $HEADER_PRIORITY $prio, $HEADER_BORROWING $borrowing, $HEADER_QUEUE_TIME $queued"
else
	fail "$WITHIN_TEAM within share: status $s, $HEADER_TEAM '$team' (want $WITHIN_TEAM, whatever $TEAM_HEADER the client sent), $HEADER_POOL '$pool' (want $POOL), $HEADER_PRIORITY '$prio' (want 0), $HEADER_BORROWING '$borrowing' (want false), $HEADER_QUEUE_TIME '$queued'"
fi
if [ "$user" = "$WITHIN_USER" ]; then
	pass "$WITHIN_TEAM's user from the token: $HEADER_USER $user (the client sent $USER_HEADER: mallory)"
else
	fail "$WITHIN_TEAM's user: $HEADER_USER '$user', want $WITHIN_USER (the token's sub), whatever $USER_HEADER the client sent"
fi

# 3. Above its share: BORROWER_REQUESTS long requests of the borrower at once,
# more than its reservation and fewer than the pool's capacity (so nothing
# is held): those beyond the reservation borrow, at priority 10 or more.
pids=()
for i in $(seq 1 "$BORROWER_REQUESTS"); do
	chat "$WORK/borrow$i" "$BORROWER" 1024 >"$WORK/borrow$i.status" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
borrowed=0 ok=0 prios=
for i in $(seq 1 "$BORROWER_REQUESTS"); do
	[ "$(cat "$WORK/borrow$i.status")" = 200 ] && ok=$((ok + 1))
	p=$(header "$WORK/borrow$i.h" "$HEADER_PRIORITY")
	prios="$prios ${p:--}"
	if [ "$(header "$WORK/borrow$i.h" "$HEADER_BORROWING")" = true ] && [ "${p:-0}" -ge 10 ]; then
		borrowed=$((borrowed + 1))
	fi
done
if [ "$ok" = "$BORROWER_REQUESTS" ] && [ "$borrowed" -ge 1 ]; then
	pass "$BORROWER above its share: $borrowed of $BORROWER_REQUESTS requests borrowed (priorities:$prios)"
else
	fail "$BORROWER above its share: $ok of $BORROWER_REQUESTS answered 200, $borrowed borrowed at priority >= 10 (priorities:$prios)"
fi

# 4. The plugin's metrics, from the gateway's Envoy.
if kubectl -n "$NAMESPACE" exec "deployment/$GATEWAY_DEPLOYMENT" -c istio-proxy -- pilot-agent request GET stats/prometheus 2>/dev/null |
	grep -q "^fairshare_requests_total{.*team=\"$BORROWER\""; then
	pass "fairshare_requests_total{team=\"$BORROWER\"} exported by the gateway"
else
	fail "no fairshare_requests_total{team=\"$BORROWER\"} in the gateway's stats/prometheus"
fi

echo "smoke: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
