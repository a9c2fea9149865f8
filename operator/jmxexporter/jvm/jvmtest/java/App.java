// A stand-in for a user's Java application: it does nothing but stay alive,
// so tests can attach to it. Its arguments are markers that tests match
// with jvmMatch.
public class App {
    public static void main(String[] args) throws Exception {
        System.out.println("app started " + String.join(" ", args));
        System.out.flush();
        while (true) {
            Thread.sleep(60_000);
        }
    }
}
