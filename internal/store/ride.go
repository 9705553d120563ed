package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/resp"
	"github.com/mediocregopher/radix/v4/resp/resp3"
)

// ride.go: acks that ride on a take. A consumer that finished deliveries and
// wants more sends their acks and its next take in one round trip: one
// pipeline of the acks' commands (ackPipelined's, unchanged) and the take's
// FCALL (EVALSHA on a server without Functions), last. Each keeps its own reply and its own error: a take that
// fails (a paused key of the wrong type, NOSCRIPT, a redirect) fails no
// ack, and an ack that lost its lease takes nothing from the take. The two
// go to the same node: a queue's keys share one slot, and the pipeline is
// routed by the acks' keys (radix gives an EVALSHA none).
//
// Why a pipeline and not one script doing both: the scripts stay as they are
// (an ack is no script at all), each outcome stays the command's own, and a
// merged script would have to check everything the take checks before the
// acks' first write.

// takeRiding is takeFrom with acks riding on it: it returns the take's reply
// and error, and one error per ack (as Shard.Ack's). Acks of caller ids
// (ack.lua) and, with WaitReplicas, all acks go apart, alone, at the same
// time (a take need not wait for replicas), and the take's reply waits for
// them: a consumer does not hand it such acks (consume.Rides). A take the
// pipeline did not run (its script missing from the server's cache, or its
// slot moving) goes again alone.
func (s *Shard) takeRiding(ctx context.Context, a takeArgs, acks []AckReq) (takeReply, []error, error) {
	if len(acks) == 0 {
		r, err := s.takeFrom(ctx, a)
		return r, nil, err
	}
	ackErrs := make([]error, len(acks))
	var ride, apart []int // places in acks
	for i, r := range acks {
		if r.Caller || s.cfg.WaitReplicas > 0 {
			apart = append(apart, i)
		} else {
			ride = append(ride, i)
		}
	}
	var wg sync.WaitGroup
	if len(apart) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, err := range s.ack(ctx, reqsAt(acks, apart)) {
				ackErrs[apart[j]] = err
			}
		}()
	}
	var r takeReply
	var err error
	if len(ride) == 0 {
		r, err = s.takeFrom(ctx, a)
	} else {
		tc := s.takeCallOf(a)
		var raw [][]byte
		rep := &ownReply{rcv: &raw}
		// FCALL of the library's take (funcs.go), or EVALSHA once a node
		// was found without Functions.
		cmd, first := "FCALL", ""
		if _, name := library(); s.rideEvalsha.Load() {
			cmd, first = "EVALSHA", takeScript.sha
		} else {
			first = name + "_" + takeScript.name
		}
		cmdArgs := make([]string, 0, 3+len(tc.keys)+len(tc.args))
		cmdArgs = append(cmdArgs, first, strconv.Itoa(len(tc.keys)+1))
		cmdArgs = append(append(append(cmdArgs, tc.keys...), s.k.fence), tc.args...)
		keys := cmdArgs[2 : 3+len(tc.keys)] // the take's keys and the fence
		errs, werr := s.ackPipelined(ctx, reqsAt(acks, ride), keyedCmd{radix.Cmd(rep, cmd, cmdArgs...), keys})
		for j, err := range errs {
			ackErrs[ride[j]] = err
		}
		switch {
		case werr != nil && !isReply(werr): // the call failed: rep may still be written
			err = fmt.Errorf("prioq: take from %q: %w", s.name, werr)
		case rep.err == nil && rep.got:
			r, err = s.takeReplyOf(ctx, tc, raw)
		case rep.err != nil && (isRedirect(rep.err) || isNoScript(rep.err) || functionMissing(rep.err) || funcsRefused(rep.err, "fcall")):
			if funcsRefused(rep.err, "fcall") {
				s.rideEvalsha.Store(true) // this shard's node runs no Functions
			}
			// Not run: alone, through the script call that loads the
			// library, or falls back to EVALSHA and EVAL (fcall), and the
			// redirect retries of do.
			r, err = s.takeFrom(ctx, a)
		case rep.err != nil:
			err = fmt.Errorf("prioq: take from %q: %w", s.name, rep.err)
		default:
			err = fmt.Errorf("prioq: take from %q: %w: no reply", s.name, ErrScript)
		}
	}
	wg.Wait()
	return r, ackErrs, err
}

// keyedCmd is a command whose keys are given, not guessed: radix knows
// where EVALSHA's keys are, but takes FCALL's first argument (the function's
// name) for its key, and a cluster client then refuses the pipeline of the
// acks and the take ("keys ... do not belong to the same slot") before
// sending any of it.
type keyedCmd struct {
	radix.Action
	keys []string
}

func (k keyedCmd) Properties() radix.ActionProperties {
	p := k.Action.Properties()
	p.Keys = k.keys
	return p
}

func reqsAt(reqs []AckReq, at []int) []AckReq {
	out := make([]AckReq, len(at))
	for j, i := range at {
		out[j] = reqs[i]
	}
	return out
}

// isNoScript reports whether err is Redis's NOSCRIPT: the script is not in
// the server's cache, and nothing ran.
func isNoScript(err error) bool {
	var se resp3.SimpleError
	return errors.As(err, &se) && strings.HasPrefix(se.Error(), "NOSCRIPT")
}

// ownReply is the receiver of a command in a pipeline whose error reply is
// its own: it keeps it (err) instead of handing it to the pipeline, which
// would return it as the first error of all (ackPipelined would take it for
// an ack's). got says a reply other than an error came.
type ownReply struct {
	rcv any
	got bool
	err error
}

func (o *ownReply) UnmarshalRESP(br resp.BufferedReader, opts *resp.Opts) error {
	err := resp3.Unmarshal(br, o.rcv, opts)
	var usable resp.ErrConnUsable
	switch {
	case err == nil:
		o.got = true
	case errors.As(err, &usable): // the reply was read whole: the connection goes on
		o.err = usable.Err
		return nil
	}
	return err
}
