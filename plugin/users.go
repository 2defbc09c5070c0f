package plugin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tidwall/gjson"
)

// Users within teams (fairshare's users.go: Fair Tree's second level),
// from the plugin's side. With user_header set every pool divides each
// team's reservation among the team's users; without it nothing of the
// user level exists (no field of the core's configuration set, no user
// in the record, no field in the status, no gauge, no header).
//
//	on_request_headers   user_header read as the team header is: sent twice or
//	                     with a comma → 400 duplicate_header; longer than 64 bytes
//	                     or a byte outside 0x21..0x7e → 400 bad_user (param: the
//	                     header); absent or empty → "" (the core's UserNone)
//	on_request_body      user_from_body only, and only without the header: the
//	                     body's "user" (a string, same bounds; else 400 bad_user,
//	                     param "user")
//	decide               fairshare.Request.User → Arrive / ArriveShadow; a held
//	                     request keeps it in the queue (Dispatch); spill-over moves
//	                     a request into a fallback as UnknownTeam, without a user
//	on_response_headers  x-fairshare-user (the user it was counted as: the name,
//	                     _none, _other) and x-fairshare-over (Grant.Over)
//	status, metrics      per team active_users, over and the top status_users
//	                     users; gauges users_active and over (no per-user series)
//
// A user's name is the client's (or the mesh's) word: the kits write the
// user header from a verified JWT claim and strip a client's copy, as they
// do the team header (docs/operating.md, "Users").

// maxUsersLimit is the largest max_users: the core clamps
// fairshare.Config.MaxUsers to 65,536.
const maxUsersLimit = 1 << 16

// maxUserShare bounds a configured user share (as a team's weight).
const maxUserShare = 1e6

// badUser says what is wrong with a user name, "" when it is a valid one:
// at most fairshare.MaxUserName bytes, each printable ASCII other than the
// space (0x21 to 0x7e). An empty name is valid (no user). Cost: O(len(s)).
func badUser(s string) string {
	if len(s) > fairshare.MaxUserName {
		return strconv.Itoa(len(s)) + " bytes, more than " + strconv.Itoa(fairshare.MaxUserName)
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x21 || b > 0x7e {
			return fmt.Sprintf("byte 0x%02x at offset %d", b, i)
		}
	}
	return ""
}

// userRule is what a valid user name is, in the words of every error
// about one.
const userRule = "1 to 64 bytes of printable ASCII without spaces (0x21-0x7e)"

// badUserError is the 400 of a user name that badUser refuses; param is
// the header (or "user" for the body's member).
func badUserError(param, why string) apiError {
	what := "header " + strconv.Quote(param)
	if param == bodyUser {
		what = "the body's \"user\""
	}
	return apiError{400, "invalid_request_error", param, what + " must be " + userRule + ": got " + why, "bad_user"}
}

// bodyUser is the OpenAI body member that names the end user.
const bodyUser = "user"

// errUserNotString answers a body "user" that is neither a string nor
// null, with user_from_body.
var errUserNotString = apiError{400, "invalid_request_error", bodyUser, "the body's \"user\" must be a string", "bad_user"}

// parseUserShares reads a team's users: an object of user name to share
// (a number in (0, 1e6]).
func parseUserShares(ps *problems, path string, v gjson.Result) []fairshare.UserShare {
	if !v.IsObject() {
		ps.add(path, "must be an object of user name to share, got %s", typeName(v))
		return nil
	}
	var out []fairshare.UserShare
	members(ps, path, v, func(name, up string, sv gjson.Result) bool {
		switch {
		case name == "":
			ps.add(up, "a user name must not be empty")
			return true
		case badUser(name) != "":
			ps.add(up, "a user name must be %s, got %s", userRule, badUser(name))
			return true
		case name == fairshare.UserNone || name == fairshare.UserOther:
			ps.add(up, "%q is reserved (%s: requests without a user; %s: new users beyond max_users)", name, fairshare.UserNone, fairshare.UserOther)
			return true
		}
		f, ok := number(ps, up, sv, 1)
		if !ok {
			return true
		}
		if !(f > 0 && f <= maxUserShare) {
			ps.add(up, "must be a share in (0, 1e6], got %s", sv.Raw)
			return true
		}
		out = append(out, fairshare.UserShare{Name: name, Share: f})
		return true
	})
	return out
}

// checkUsers validates the user level across the configuration, once
// every field is read: user_header differs from the other identity
// headers and is not one the plugin removes, and every user-level field
// (user_from_body true, and poolFields: the paths of the pools'
// max_users, user_active, user_idle and teams' users) has user_header to
// act on.
func checkUsers(ps *problems, c *config, poolFields []string) {
	if c.userHeader == "" {
		const needs = "needs user_header: without it the user level is off"
		if c.userFromBody {
			ps.add("user_from_body", "%s (a request's user is read from user_header first)", needs)
		}
		for _, f := range poolFields {
			ps.add(f, needs)
		}
		return
	}
	switch {
	case c.userHeader == c.teamHeader:
		ps.add("user_header", "must differ from team_header (%q)", c.teamHeader)
	case c.userHeader == c.classHeader:
		ps.add("user_header", "must differ from class_header (%q)", c.classHeader)
	case strings.HasPrefix(c.userHeader, headerPrefix):
		ps.add("user_header", "must not start with %q: the plugin removes a client's %s* headers, got %q", headerPrefix, headerPrefix, c.userHeader)
	}
}

// requestUser reads the user of a scheduled request from its header's
// values (count of them and the last), as the team is read: refused
// when sent twice or as a list, or when not a valid name (badUser).
func (h *httpContext) requestUser(n int, v string) (apiError, bool) {
	header := h.pc.cfg.userHeader
	if n > 1 || strings.IndexByte(v, ',') >= 0 {
		return duplicateHeaderError(header), false
	}
	v = strings.TrimSpace(v)
	if why := badUser(v); why != "" {
		return badUserError(header, why), false
	}
	h.user = strings.Clone(v) // v views pc.hdrBuf
	return apiError{}, true
}

// bodyUserOf is the user of a request without one in its header, with
// user_from_body: its body's "user" (a string; null and "" are none).
func (h *httpContext) bodyUserOf(req *request, body []byte) (apiError, bool) {
	if !h.pc.cfg.userFromBody || h.user != "" || !req.userSet {
		return apiError{}, true
	}
	v := parseValue(body[req.user.at:req.user.end])
	switch v.Type {
	case gjson.Null:
		return apiError{}, true
	case gjson.String:
	default:
		return errUserNotString, false
	}
	if why := badUser(v.Str); why != "" {
		return badUserError(bodyUser, why), false
	}
	h.user = strings.Clone(v.Str) // v.Str may view the body
	return apiError{}, true
}

// Response headers of the user level (with user_header and
// response_headers).
const (
	// HeaderUser is the user the request was counted as within its team:
	// its name, fairshare.UserNone for none, fairshare.UserOther for a
	// new user of a team whose max_users entries are all busy.
	HeaderUser = "x-fairshare-user"
	// HeaderOver is "true" when the request took a reserved sequence its
	// teammates left (fairshare.Grant.Over: counted as borrowing, at
	// priority 2 to 9), "false" otherwise.
	HeaderOver = "x-fairshare-over"
)

// userLabel is the user the request counts as: the grant's when the pool
// counted it under one, else the name read (UserNone for none).
func (h *httpContext) userLabel() string {
	switch {
	case h.grant.User != "":
		return h.grant.User
	case h.user != "":
		return h.user
	}
	return fairshare.UserNone
}

// userHeaders adds x-fairshare-user and x-fairshare-over to the response
// (with the user level).
func (h *httpContext) userHeaders() {
	if h.pc.cfg.userHeader == "" {
		return
	}
	_ = hostcalls.ReplaceHttpResponseHeader(HeaderUser, h.userLabel())
	_ = hostcalls.ReplaceHttpResponseHeader(HeaderOver, strconv.FormatBool(h.grant.Over))
}
