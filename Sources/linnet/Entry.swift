// The process entry. Embedded Swift has no `CommandLine`, so there the C `main` is
// defined here and argv is read directly; full Swift uses `@main`.
import CSystem
import Agent
import Runtime

#if hasFeature(Embedded)
@_cdecl("main")
func linnetCMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    var arguments: [String] = []
    for i in 0..<Int(argc) {
        if let p = argv[i] { arguments.append(String(cString: p)) }
    }
    return CLI.main(arguments).rawValue
}
#else
@main
struct LinnetMain {
    static func main() {
        exit(CLI.main(CommandLine.arguments).rawValue)
    }
}
#endif
