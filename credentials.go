package leangrpc

import (
	"context"
	"errors"
	"strings"

	"github.com/leangrpc/leangrpc/internal/grpcwire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// errInsecureCallCreds is grpc-go's answer to per-call credentials that
// require transport security on a connection without privacy and
// integrity.
var errInsecureCallCreds = status.Error(codes.Unauthenticated, "transport: cannot send secure credentials on an insecure connection")

// perRPCMetadata returns the metadata of a call on a connection whose
// handshake gave auth: the fields of the ClientConn's per-RPC credentials,
// then those of the call's (callCreds, may be nil), then the user's
// (userMD, not modified), in the order grpc-go sends them. Each
// credential's GetRequestMetadata gets a context carrying
// credentials.RequestInfo (the method and auth), which token credentials
// check the security level against, and the audience grpc-go forms:
// "https://" + authority without ":443" + the method's service path.
// Errors have grpc-go's codes and messages.
func (cc *ClientConn) perRPCMetadata(ctx context.Context, req *grpcwire.Request, userMD metadata.MD, callCreds credentials.PerRPCCredentials, auth credentials.AuthInfo) (metadata.MD, error) {
	ctx = credentials.NewContextWithRequestInfo(ctx, credentials.RequestInfo{Method: req.Method, AuthInfo: auth})
	audience := credsAudience(req.Authority, req.Method)
	md := make(metadata.MD, len(userMD)+2)
	if len(cc.opts.perRPC) > 0 {
		// The connection's credentials as one set: a later one's field
		// replaces an earlier one's of the same name.
		conn := make(map[string]string)
		for _, c := range cc.opts.perRPC {
			kv, err := c.GetRequestMetadata(ctx, audience)
			if err != nil {
				return nil, credsError(err, codes.Unauthenticated)
			}
			if err := addCredsFields(conn, kv); err != nil {
				return nil, err
			}
		}
		for k, v := range conn {
			md[k] = append(md[k], v)
		}
	}
	if callCreds != nil {
		if callCreds.RequireTransportSecurity() && credentials.CheckSecurityLevel(auth, credentials.PrivacyAndIntegrity) != nil {
			return nil, errInsecureCallCreds
		}
		kv, err := callCreds.GetRequestMetadata(ctx, audience)
		if err != nil {
			// grpc-go reports a failure of the call's own credentials
			// as Internal, of the connection's as Unauthenticated.
			return nil, credsError(err, codes.Internal)
		}
		call := make(map[string]string, len(kv))
		if err := addCredsFields(call, kv); err != nil {
			return nil, err
		}
		for k, v := range call {
			md[k] = append(md[k], v)
		}
	}
	for k, vs := range userMD {
		k = strings.ToLower(k)
		md[k] = append(md[k], vs...)
	}
	return md, nil
}

// addCredsFields adds the fields a credential returned to dst, names in
// lower case (HTTP/2 refuses capitals), each checked as grpc-go does.
func addCredsFields(dst, kv map[string]string) error {
	for k, v := range kv {
		k = strings.ToLower(k)
		if err := grpcwire.ValidatePair(k, v); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		dst[k] = v
	}
	return nil
}

// credsError is the call's error when a credential's GetRequestMetadata
// failed: a status error keeps its status unless its code is one gRFC A54
// forbids the control plane to hand to applications (then Internal), any
// other error gets code with grpc-go's message.
func credsError(err error, code codes.Code) error {
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
			codes.Aborted, codes.OutOfRange, codes.DataLoss:
			return status.Errorf(codes.Internal, "transport: received per-RPC creds error with illegal status: %v", err)
		}
		return err
	}
	return status.Errorf(code, "transport: per-RPC creds failed due to error: %v", err)
}

// credsAudience is the audience (the URI) per-RPC credentials are asked
// for: "https://" + the authority without a default port + the method up
// to its last slash ("/package.Service").
func credsAudience(authority, method string) string {
	host := strings.TrimSuffix(authority, ":443")
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		method = method[:i]
	}
	return "https://" + host + method
}

// checkConnCreds refuses a connection whose handshake gave less than
// privacy and integrity when one of the ClientConn's per-RPC credentials
// requires transport security (NewClient already refused plaintext
// credentials); an AuthInfo that states no level passes, as in grpc-go.
func (cc *ClientConn) checkConnCreds(auth credentials.AuthInfo) error {
	ai, ok := auth.(interface {
		GetCommonAuthInfo() credentials.CommonAuthInfo
	})
	if !ok {
		return nil
	}
	level := ai.GetCommonAuthInfo().SecurityLevel
	if level == credentials.InvalidSecurityLevel || level >= credentials.PrivacyAndIntegrity {
		return nil
	}
	for _, c := range cc.opts.perRPC {
		if c.RequireTransportSecurity() {
			return errConnInsecureCreds
		}
	}
	return nil
}

// errConnInsecureCreds fails a connection as grpc-go's transport does; the
// calls waiting for it see Unavailable with this text.
var errConnInsecureCreds = errors.New("transport: cannot send secure credentials on an insecure connection")
