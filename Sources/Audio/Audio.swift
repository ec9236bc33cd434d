/// Audio: frame and format types, the capture/playback hook API, fixed-point DSP, the
/// resampler and the lock-free SPSC ring between threads. (Contents arrive with issue 3.)
import Wire
