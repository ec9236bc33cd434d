// The speexdsp calls the two speexdsp hooks (EchoCanceller.swift,
// SpeexPreprocessor.swift) make on the capture thread, wrapped one by one so the
// `@_noLocks` audit can leave them out, and the frame check both hooks share.
import CSpeexDSP

// Acoustic echo cancellation, residual echo and noise suppression, and a voice-activity
// flag: speexdsp's MDF canceller and preprocessor behind the hook API. speexdsp takes
// int16 frames (inside, this build works in floating point: its fixed-point MDF cancelled
// 3–5 dB less, see scripts/build-speexdsp.sh); its states are allocated once, when a
// hook is made, and `speex_echo_cancellation` / `speex_preprocess_run` work in them
// without allocating, locking or logging (the library is built with DISABLE_WARNINGS).

// speexdsp's calls on the capture thread, excluded from the `@_noLocks` audit as the user
// hooks are: it cannot see into C. The library allocates only in its *_init functions,
// takes no lock and prints nothing (built with DISABLE_WARNINGS, scripts/build-speexdsp.sh).
@_semantics("no_performance_analysis") @inline(never)
func speexCancel(_ st: OpaquePointer, _ near: UnsafeMutablePointer<Int16>, _ far: UnsafeMutablePointer<Int16>, _ out: UnsafeMutablePointer<Int16>) {
    speex_echo_cancellation(st, near, far, out)
}
@_semantics("no_performance_analysis") @inline(never)
func speexEchoReset(_ st: OpaquePointer) { speex_echo_state_reset(st) }
@_semantics("no_performance_analysis") @inline(never)
func speexEchoAdapt(_ st: OpaquePointer, _ q15: Int32) { _ = linnet_echo_set_adapt(st, q15) }
@_semantics("no_performance_analysis") @inline(never)
func speexEchoLearn(_ st: OpaquePointer, _ frames: Int32) { _ = linnet_echo_learn_residual(st, frames) }
@_semantics("no_performance_analysis") @inline(never)
func speexPreprocess(_ st: OpaquePointer, _ x: UnsafeMutablePointer<Int16>) { _ = speex_preprocess_run(st, x) }
@_semantics("no_performance_analysis") @inline(never)
func speexPreSet(_ st: OpaquePointer, _ request: Int32, _ value: Int32) { _ = linnet_pre_set_int(st, request, value) }
@_semantics("no_performance_analysis") @inline(never)
func speexPreGet(_ st: OpaquePointer, _ request: Int32) -> Int32 { linnet_pre_get_int(st, request) }

/// The frame a speexdsp state was made for (mono, its rate, its frame length), or nil:
/// both speexdsp hooks pass any other frame through untouched.
@inline(__always)
func speexFrame(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo, rate: SampleRate, frameSamples: Int) -> UnsafeMutablePointer<Int16>? {
    guard info.channels == 1, info.sampleRate == rate, info.sampleCount == frameSamples, samples.count >= frameSamples else { return nil }
    return samples.baseAddress
}
